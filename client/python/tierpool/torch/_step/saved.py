"""What autograd saves for backward, held by the job: each activation is stored under the plan's
name for it as it is saved and read back as a view of its hbm copy when backward needs it; a
saved parameter (or a view of one) is kept as a reference to it and read back from the
parameter's object. The first read of each in backward is an event of the job (the step it
starts), and an activation's object is let go the moment autograd frees what it saved.

A tensor saved twice (a ReLU's output, saved by the ReLU and the next Linear) is stored once. A
transposed or permuted tensor is stored in its dense memory order and comes back with the same
strides, so backward's kernels see the layout they would have seen.
"""

import weakref

import torch

from . import views


class _Ref:
    __slots__ = ("job", "seq", "unpacked", "__weakref__")


class SavedActivation(_Ref):
    """An activation in tierpool (``key``), or, while the first step is recorded, in memory."""

    # remake: where the plan recomputes it, its recipe (recipes.Remake); key is None until it is
    # stored or made.
    __slots__ = ("key", "dtype", "shape", "restore", "nbytes", "tensor", "last", "original",
                 "remake")

    def __del__(self):
        job = self.job
        if job is not None:
            job.saved.forget(self)


class SavedParam(_Ref):
    """A saved parameter, or a view of one: its index and the view's geometry."""

    __slots__ = ("param", "size", "stride", "offset")


class SavedTensors:
    """The pack and unpack hooks of one job (installed around the model's forward)."""

    def __init__(self, job, min_bytes):
        self.job = job
        self.min_bytes = min_bytes
        self.seq = 0  # packs this iteration
        self._saved_of = {}  # id(tensor) -> (weakref to it, its version, weakref to its ref)
        self._owner = {}  # key -> the SavedActivation that stored it last (weak)
        self.garbage = []  # keys autograd has let go, deleted at the next step
        # Where the plan recomputes (remakes.py finds a recompute's inputs by pack): pack
        # sequence number -> weak ref to its SavedActivation, this iteration.
        self.track_seqs = False
        self.by_seq = {}
        # While the first step is recorded: bytes of saved activations held for backward alone
        # (the tensor the model made is gone, as it will be once a copy is in tierpool).
        self.held_bytes = 0

    def new_iteration(self):
        self.seq = 0
        self.by_seq.clear()

    # ---- pack ----

    def pack(self, t):
        job = self.job
        p = job.params.index_of(t)
        if p is not None:
            return self._pack_param(t, p)
        if views.nbytes(t) < self.min_bytes or _is_parameter(t):
            return t  # small, or a parameter the job does not hold: it stays where it is
        seen = self._saved_of.get(id(t))
        if seen is not None and seen[0]() is t and seen[1] == t._version:
            ref = seen[2]()
            if ref is not None:
                return ref
        stored, restore = views.dense(t)
        ref = SavedActivation()
        ref.job, ref.unpacked, ref.last, ref.original, ref.remake = job, False, None, None, None
        ref.seq = self.seq
        self.seq += 1
        ref.dtype, ref.shape, ref.restore = t.dtype, tuple(stored.shape), restore
        ref.nbytes = views.nbytes(stored)
        if self.track_seqs:
            self.by_seq[ref.seq] = weakref.ref(ref)
        ref.key, ref.tensor = job.store_activation(ref, stored, t)
        if ref.key is not None:
            self._owner[ref.key] = weakref.ref(ref)
        elif ref.tensor is not None:
            # Recording: the tensor is kept as it is (no copy), and counts as held once the one
            # the model made is gone; until then it is the trainer's, as it is when the plan
            # runs (the copy in tierpool beside it).
            ref.tensor = ref.tensor.detach()
            ref.original = weakref.ref(t, lambda _, n=ref.nbytes: self._original_gone(n))
        tid = id(t)
        self._saved_of[tid] = (weakref.ref(t, lambda _, tid=tid: self._saved_of.pop(tid, None)),
                               t._version, weakref.ref(ref))
        return ref

    def _original_gone(self, nbytes):
        self.held_bytes += nbytes
        self.job.held_changed()

    def _pack_param(self, t, p):
        ref = SavedParam()
        ref.job, ref.unpacked, ref.param = self.job, False, p
        ref.size, ref.stride = tuple(t.shape), tuple(t.stride())
        ref.offset = t.storage_offset() - self.job.params.held[p].param.storage_offset()
        ref.seq = self.seq
        self.seq += 1
        self.job.note_param_saved(ref, t)
        return ref

    def key_in_use(self, key):
        """Whether an activation stored under ``key`` is still held (saved by an earlier
        forward that no backward has read yet): a new one must not replace its bytes."""
        ref = self._owner.get(key)
        return ref is not None and ref() is not None

    # ---- unpack ----

    def unpack(self, ref):
        if isinstance(ref, torch.Tensor):
            return ref
        job = self.job
        if not ref.unpacked:
            ref.unpacked = True
            job.first_read(ref)
        if isinstance(ref, SavedParam):
            base = job.read_param(ref.param)
            return base.as_strided(ref.size, ref.stride, base.storage_offset() + ref.offset)
        last = ref.last() if ref.last is not None else None
        if last is not None:
            return last  # the other saved variable of the same tensor brought it back already
        stored = ref.tensor if ref.tensor is not None else job.read_activation(ref)
        out = stored if ref.restore is None else stored.permute(ref.restore)
        ref.last = weakref.ref(out)
        return out

    # ---- forgetting ----

    def forget(self, ref):
        if ref.original is not None:
            if ref.original() is None:
                self.held_bytes -= ref.nbytes
            ref.original = None  # no callback from here on
        ref.remake = None
        key = ref.key
        if key is not None:
            owner = self._owner.get(key)
            if owner is not None and owner() in (None, ref):
                del self._owner[key]
                self.garbage.append(key)
        self.job.held_changed()

    def ref_of(self, seq):
        """This iteration's SavedActivation of pack ``seq``, while it lives (track_seqs)."""
        w = self.by_seq.get(seq)
        return w() if w is not None else None

    def rekey(self, ref, key):
        """``ref`` is read from ``key`` from now on (its copy made again): its old key, if it
        had one, is let go."""
        old = ref.key
        if old is not None:
            owner = self._owner.get(old)
            if owner is not None and owner() is ref:
                del self._owner[old]
                self.garbage.append(old)
        ref.key = key
        self._owner[key] = weakref.ref(ref)

    def take_garbage(self):
        keys, self.garbage = self.garbage, []
        return keys


def _is_parameter(t):
    """A leaf that requires grad, or a view of one."""
    base = t._base if t._base is not None else t
    return base.is_leaf and base.requires_grad
