"""Recompute in a planned step: which saved activations can be made again, and making them.

While the first step's forward is recorded, every op is seen (job.py's dispatch mode): an op
that is pure, deterministic and cheap (``OPS``: elementwise ops, activations, layer norm,
softmax) leaves a recipe for its outputs, kept until another op writes there. When autograd
saves such an output, the recipe holds if everything the op read is a parameter the job holds,
another parameter of the model (a norm's small weight, read by name), or a saved activation
stored before; the schedule then carries it (schedule.proto's ``Recipe``: those inputs and the
op's measured time) and the planner may recompute the tensor instead of moving it.

From the second step on, a saved tensor the plan recomputes is not stored when it is saved
(unless a use before the recompute needs it): its ref keeps the recipe and the refs of its
inputs. At the plan's step for it the op runs again on the inputs' hbm copies and its output is
put under the tensor's key with "@recompute" added, where backward reads it. A step that left
the recorded one makes it on the spot when backward reads it instead. Same op, same bytes in,
same kernel: the same bytes out (the tests compare whole trainings bit for bit).

Locking: none; the job's thread only.
"""

import time

import torch
from torch.utils._pytree import tree_flatten, tree_unflatten

_aten = torch.ops.aten

# Pure and deterministic on the CPU, out of place, and cheap beside the matmuls between them.
OPS = frozenset([
    _aten.relu.default, _aten.gelu.default, _aten.silu.default, _aten.sigmoid.default,
    _aten.tanh.default, _aten.neg.default, _aten.exp.default, _aten.mul.Tensor,
    _aten.mul.Scalar, _aten.add.Tensor, _aten.sub.Tensor, _aten.div.Tensor, _aten.div.Scalar,
    _aten.native_layer_norm.default, _aten._softmax.default, _aten.rsqrt.default,
])

CONST, PARAM, MODEL, SAVED = "const", "param", "model", "saved"


def identity(t):
    """What names a tensor's bytes while it lives: where they are and how they are laid out."""
    return (t.data_ptr(), tuple(t.shape), tuple(t.stride()), t.dtype)


class _Bytes:
    """A tensor's bytes as one op made them or autograd saved them, at a version."""

    __slots__ = ("shape", "stride", "dtype", "version", "dense", "numel")

    def __init__(self, t):
        self.shape, self.stride, self.dtype = tuple(t.shape), tuple(t.stride()), t.dtype
        self.version, self.dense, self.numel = t._version, t.is_contiguous(), t.numel()

    def seen_as(self, other):
        """Whether ``other`` (a _Bytes at the same address) is these bytes: the same layout, or
        both dense with as many elements (a reshape of it, as ``linear`` saves a 3-d input)."""
        if other.dtype != self.dtype or other.version != self.version:
            return False
        same = other.shape == self.shape and other.stride == self.stride
        return same or (self.dense and other.dense and other.numel == self.numel)


class Recipe:
    """An op and what it read: each leaf of its arguments a constant, a held parameter (index),
    a parameter of the model the job does not hold (name) or a saved activation ((pack sequence number, the shape the op
    read it in)); ``shape``: the shape autograd saved its output in."""

    __slots__ = ("func", "spec", "leaves", "out", "seconds", "shape")

    def __init__(self, func, spec, leaves, out, seconds, shape):
        self.func, self.spec, self.leaves, self.out = func, spec, leaves, out
        self.seconds, self.shape = seconds, shape

    def saved_inputs(self):
        return [v[0] for k, v in self.leaves if k == SAVED]

    def param_inputs(self):
        return [v for k, v in self.leaves if k == PARAM]

    def model_inputs(self):
        return [v for k, v in self.leaves if k == MODEL]

    def run(self, value_of):
        """The op again, on the tensors ``value_of(kind, what)`` gives; no autograd."""
        args = [v if k == CONST else value_of(k, v) for k, v in self.leaves]
        a, kw = tree_unflatten(args, self.spec)
        with torch.no_grad():
            out = self.func(*a, **kw)
        out = out[self.out] if isinstance(out, (tuple, list)) else out
        return out if tuple(out.shape) == self.shape else out.view(self.shape)


class _Seen:
    __slots__ = ("func", "spec", "leaves", "out", "seconds", "bytes")


class Producers:
    """While the first step is recorded: the recipe of each tensor an op of ``OPS`` made."""

    def __init__(self, param_at, model_tensors):
        """``param_at(tensor)``: the held parameter the tensor is (index), or None;
        ``model_tensors``: {identity: name} of the model's other parameters."""
        self._param_at = param_at
        self._model = model_tensors
        self._made = {}  # address -> _Seen
        self._saved = {}  # address -> [(_Bytes, pack sequence number)]

    def run(self, func, args, kwargs):
        """Runs an op (from the dispatch mode) and notes what it made."""
        t0 = time.perf_counter()
        out = func(*args, **kwargs)
        seconds = time.perf_counter() - t0
        outs = out if isinstance(out, (tuple, list)) else (out,)
        flat, spec = tree_flatten((list(args), dict(kwargs)))
        read = {a.data_ptr() for a in flat if isinstance(a, torch.Tensor)}
        leaves = self._leaves(flat) if func in OPS else None
        for i, o in enumerate(outs):
            if not isinstance(o, torch.Tensor) or o.device.type == "meta":
                continue
            if o.data_ptr() in read and leaves is None:
                continue  # a view of what it read, or a write into it (which its version says)
            self._made.pop(o.data_ptr(), None)
            if leaves is not None:
                s = _Seen()
                s.func, s.spec, s.leaves, s.out = func, spec, leaves, i
                s.seconds, s.bytes = seconds, _Bytes(o)
                self._made[o.data_ptr()] = s
        return out

    def _leaves(self, flat):
        leaves = []
        for a in flat:
            if not isinstance(a, torch.Tensor):
                leaves.append((CONST, a))
                continue
            p = self._param_at(a)
            if p is not None:
                leaves.append((PARAM, p))
                continue
            name = self._model.get(identity(a))
            if name is not None:
                leaves.append((MODEL, name))
                continue
            leaves.append(("tensor", (a.data_ptr(), _Bytes(a))))
        return leaves

    def saved(self, t, seq):
        """Autograd saved ``t`` as pack ``seq`` (stored by the job): its recipe, if it has one
        whose every input is known, else None."""
        saved = _Bytes(t)
        self._saved.setdefault(t.data_ptr(), []).append((saved, seq))
        s = self._made.get(t.data_ptr())
        if s is None or not s.bytes.seen_as(saved):
            return None
        leaves = []
        for k, v in s.leaves:
            if k == "tensor":
                ptr, read = v
                found = next((q for b, q in self._saved.get(ptr, ()) if b.seen_as(read)), None)
                if found is None or found == seq:
                    return None  # an input that is not stored, or the tensor itself
                leaves.append((SAVED, (found, read.shape)))
            else:
                leaves.append((k, v))
        return Recipe(s.func, s.spec, leaves, s.out, s.seconds, saved.shape)


class Remake:
    """A saved activation the plan recomputes, on its way in a planned step: its recipe, the
    refs of the saved activations it reads (kept alive until it is made), and its copy's key."""

    __slots__ = ("recipe", "inputs", "versions", "copy_key", "at_step", "made")

    def __init__(self, recipe, inputs, versions, copy_key, at_step):
        """``versions``: each model parameter it reads (name) and its version when saved."""
        self.recipe, self.inputs, self.versions = recipe, inputs, versions
        self.copy_key, self.at_step, self.made = copy_key, at_step, False
