"""The optimizer's side of a job: ``optimizer.step()`` updates each parameter the job holds in a
step of its own, in the order of the optimizer's groups, with its gradient and optimizer states
read from tierpool and its new values written there; gradient clipping over gradients that live
in tierpool."""

import math
import time

import torch

from ... import _errors
from . import views

# Optimizers known to read p.grad only: the gradient is handed to them as a view of its tierpool
# copy, which is mapped read-only. Any other gets a copy it may write.
_READS_GRAD_ONLY = ("SGD", "Adam", "AdamW", "Adamax", "Adagrad", "RMSprop", "NAdam", "RAdam",
                    "Adadelta")


class HeldState:
    """An optimizer state the job holds (Adam's exp_avg of a parameter, say)."""

    __slots__ = ("name", "key", "dtype", "shape", "placeholder")

    def __init__(self, name, key, t):
        self.name, self.key, self.dtype, self.shape = name, key, t.dtype, tuple(t.shape)
        self.placeholder = torch.empty(0, dtype=t.dtype, device=t.device)


class Updates:
    def __init__(self, job, optimizer, min_bytes):
        self.job = job
        self.optimizer = optimizer
        self.min_bytes = min_bytes
        self.held = {}  # param index -> [HeldState]
        self.copy_grads = type(optimizer).__name__ not in _READS_GRAD_ONLY
        self.step_fn = optimizer.step
        optimizer.step = self.step

    def remove(self):
        self.optimizer.step = self.step_fn

    def tensor_states(self, p):
        """(name, tensor) of p's optimizer states the job holds (large enough)."""
        return [(n, t) for n, t in self.optimizer.state.get(p, {}).items()
                if torch.is_tensor(t) and views.nbytes(t) >= self.min_bytes]

    # ---- optimizer.step ----

    def step(self, closure=None):
        """The wrapped ``optimizer.step``: each parameter the job holds is updated in its own
        step of the plan, its copy and its states' in tierpool written anew."""
        job = self.job
        job.pop_hooks()
        if not job.stepping():
            return self.step_fn() if closure is None else self.step_fn(closure)
        if closure is not None:
            raise _errors.InvalidArgument(
                "tierpool.torch.offload steps the optimizer one parameter at a time; a "
                "closure (which may read every parameter) is not supported", 1)
        groups = self.optimizer.param_groups
        rest = [dict(g, params=[p for p in g["params"] if job.params.index_of(p) is None])
                for g in groups]
        rest = [g for g in rest if g["params"]]
        if rest:
            self._step_groups(rest)
        for g in groups:
            for p in g["params"]:
                i = job.params.index_of(p)
                if i is None:
                    continue
                if job.recording():
                    self._record(g, i)
                else:
                    self._run(g, i)
        job.end_iteration()
        return None

    def _step_groups(self, groups):
        saved = self.optimizer.param_groups
        self.optimizer.param_groups = groups
        try:
            self.step_fn()
        finally:
            self.optimizer.param_groups = saved

    def _record(self, group, i):
        job = self.job
        p = job.params.held[i].param
        if p.grad is None:
            return
        job.close_interval()
        job.rec.update(i, time.perf_counter())
        before = {n for n, _ in self.tensor_states(p)}
        self._step_groups([dict(group, params=[p])])
        states = self.tensor_states(p)
        created = sum(views.nbytes(t) for n, t in states if n not in before)
        job.note_held(created)
        job.rec.update_states(i, [(n, views.nbytes(t), views.dtype_name(t.dtype), t.shape)
                                  for n, t in states])
        # The optimizer made the states it keeps (Adam's first step) before they were counted.
        job.close_interval(unaccounted=created)

    def _run(self, group, i):
        job = self.job
        h = job.params.held[i]
        p = h.param
        if not job.has_gradient(i):
            return  # no gradient this step: the optimizer leaves it
        job.event(("update", i))
        states = self.held.get(i, [])
        gkey = job.grad_key(i)[0]
        keys = [h.key] + [s.key for s in states] + [gkey]
        metas = [(h.dtype, h.shape)] + [(s.dtype, s.shape) for s in states] + [(h.dtype, h.shape)]
        old = job.read_views(keys, metas)
        grad = old.pop()
        if self.copy_grads:
            grad = grad.clone()
        rooms, fresh = [], []
        try:
            # Each tensor is written anew (a two-phase write), one at a time: the old object
            # goes once copied, so the step holds one extra copy at most. A job that dies here
            # loses the tensor, as it would one half written in place.
            for j, key in enumerate(keys[:-1]):
                dtype, shape = metas[j]
                r = job.client.reserve(key, views.nbytes(old[j]),
                                       kind="weight" if j == 0 else "optimizer_state",
                                       tier=job.step_tier(), dtype=views.dtype_name(dtype),
                                       shape=list(shape))
                rooms.append(r)
                t = views.over_room(r, dtype, shape)
                t.copy_(old[j])
                fresh.append(t)
                old[j] = None  # the view goes, and its pin
                job.client.delete(key)
            p.data = fresh[0]
            state = self.optimizer.state[p]
            for s, t in zip(states, fresh[1:]):
                state[s.name] = t
            p.grad = grad
            try:
                self._step_groups([dict(group, params=[p])])
            finally:
                p.data = h.placeholder
                p.grad = None
                for s in states:
                    state[s.name] = s.placeholder
                del fresh, grad, t
            for r in rooms:
                r.commit()
        except BaseException:
            for r in rooms:
                r.abort()
            raise
        job.gradient_used(i, gkey)

    # ---- moving the states in and out ----

    def move_in(self, p, index, key_of, tier_of):
        """Puts p's optimizer states into tierpool (``key_of(name)``, ``tier_of(name)``) and
        leaves placeholders in the optimizer's state."""
        state = self.optimizer.state.get(p, {})
        kept = []
        for name, t in self.tensor_states(p):
            s = HeldState(name, key_of(name), t)
            self.job.client.put(s.key, t.contiguous(), kind="optimizer_state", tier=tier_of(name))
            state[name] = s.placeholder
            kept.append(s)
        if kept:
            self.held[index] = kept
        else:
            self.held.pop(index, None)

    def read_in(self, index):
        """p's held states as tensors of the trainer's own: [(HeldState, tensor)]."""
        out = []
        for s in self.held.get(index, []):
            t = torch.empty(s.shape, dtype=s.dtype)
            self.job.client.get_into(s.key, t)
            out.append((s, t))
        return out

    # ---- gradient clipping ----

    def clip_grad_norm_(self, parameters, max_norm, norm_type=2.0, error_if_nonfinite=False):
        """``torch.nn.utils.clip_grad_norm_`` for gradients that live in tierpool between
        backward and ``optimizer.step()`` (where ``p.grad`` is None): the same norm, computed in
        the same order, and the same scaling, written back to tierpool."""
        job = self.job
        if isinstance(parameters, torch.Tensor):
            parameters = [parameters]
        grads = []  # (param, its held index or None, the gradient)
        for p in parameters:
            i = job.params.index_of(p)
            if i is not None and job.has_gradient(i):
                key = job.grad_key(i)[0]
                h = job.params.held[i]
                grads.append((p, i, job.read_views([key], [(h.dtype, h.shape)])[0]))
            elif p.grad is not None:
                grads.append((p, None, p.grad))
        max_norm, norm_type = float(max_norm), float(norm_type)
        if not grads:
            return torch.tensor(0.0)
        device = grads[0][2].device
        if norm_type == math.inf:
            norms = [g.detach().abs().max().to(device) for _, _, g in grads]
            total = norms[0] if len(norms) == 1 else torch.max(torch.stack(norms))
        else:
            total = torch.norm(torch.stack([torch.norm(g.detach(), norm_type).to(device)
                                            for _, _, g in grads]), norm_type)
        if error_if_nonfinite and torch.logical_or(total.isnan(), total.isinf()):
            raise RuntimeError("The total norm of order %s for gradients from `parameters` is "
                               "non-finite, so it cannot be clipped" % norm_type)
        coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
        for k, (p, i, g) in enumerate(grads):
            grads[k] = None  # a view let go as soon as its gradient is replaced
            if i is None:
                g.detach().mul_(coef.to(g.device))
                continue
            scaled = g * coef.to(g.device)
            del g
            key, planned = job.grad_key(i)
            job.client.put(key, scaled, tier="hbm" if planned else None)
        return total
