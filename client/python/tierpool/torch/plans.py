"""Which of a schedule's tensors are the ones autograd saves, for offload_activations' plan path.

`tierpool schedule from-torch` traces the joint forward-backward graph; autograd, running the
model, saves a subset of the same tensors (the inputs and outputs of ops that backward reads) in
forward order. The two are matched by order and size: each tensor autograd saves takes the next
schedule candidate of the same byte size within a short look-ahead, and one that finds none is
offloaded without a plan entry (its own key, no progress reports). A wrong match can cost
prefetch hits, never correctness: keys only name objects, and every byte still comes back from
the object it was put in.
"""

import json
import os

_CANDIDATE_KINDS = ("SAVED_ACTIVATION", "INPUT")
LOOK_AHEAD = 8  # schedule candidates skipped at most to find one of the saved tensor's size


class ActivationPlan:
    """The schedule's tensors that autograd will save, in saving order: ``keys`` (the tensor
    names, which ``Client.register_plan`` uses as object keys by default), ``sizes`` (bytes) and
    ``steps`` ((the step that saves it, its first backward step) for progress reports).
    Without ``sizes`` the entries are taken in order, one per offloaded tensor."""

    __slots__ = ("keys", "sizes", "steps")

    def __init__(self, keys, sizes=None, steps=None):
        self.keys = list(keys)
        self.sizes = None if sizes is None else [int(n) for n in sizes]
        self.steps = None if steps is None else [(int(a), int(b)) for a, b in steps]
        for name, v in (("sizes", self.sizes), ("steps", self.steps)):
            if v is not None and len(v) != len(self.keys):
                raise ValueError("%s has %d entries for %d keys" % (name, len(v), len(self.keys)))

    def __len__(self):
        return len(self.keys)

    @classmethod
    def from_schedule(cls, schedule, *, min_bytes=1 << 20):
        """``schedule``: the JSON `tierpool schedule from-torch --json` writes (a path, a str or
        bytes of JSON, or the parsed dict). Keeps the saved activations and inputs backward
        reads, of at least ``min_bytes`` (the offload's own threshold)."""
        s = _load(schedule)
        tensors = s.get("tensors")
        if not isinstance(tensors, list):
            raise ValueError("not a tierpool schedule: no 'tensors' list")
        saved = [t for t in tensors if t.get("kind") == "SAVED_ACTIVATION"]
        if not saved:
            raise ValueError("the schedule has no SAVED_ACTIVATION tensors (is it a training "
                             "schedule from `tierpool schedule from-torch`?)")
        # The forward pass ends with the last saved activation's definition: uses after it are
        # backward's.
        forward_end = max(int(t.get("def_step", -1)) for t in saved)
        picked = []
        for index, t in enumerate(tensors):
            if t.get("kind") not in _CANDIDATE_KINDS:
                continue
            size = int(t.get("size_bytes", 0))
            backward = [int(u) for u in t.get("use_steps", ()) if int(u) > forward_end]
            if size < min_bytes or not backward:
                continue
            saved_at = max(int(t.get("def_step", -1)), 0)
            picked.append((saved_at, index, t["name"], size,
                           backward[0]))
        picked.sort()
        return cls([p[2] for p in picked], [p[3] for p in picked],
                   [(p[0], p[4]) for p in picked])


class _Matcher:
    """Walks an ActivationPlan in step with one forward pass (see the module's docstring)."""

    __slots__ = ("plan", "cursor")

    def __init__(self, plan):
        self.plan = plan
        self.cursor = 0

    def reset(self):
        self.cursor = 0

    def take(self, nbytes):
        """The plan index of the tensor being saved, or None."""
        sizes = self.plan.sizes
        if sizes is None:  # by position
            i = self.cursor
            self.cursor += 1
            return i if i < len(self.plan.keys) else None
        end = min(len(sizes), self.cursor + LOOK_AHEAD)
        for i in range(self.cursor, end):
            if sizes[i] == nbytes:
                self.cursor = i + 1
                return i
        return None


def _load(schedule):
    if isinstance(schedule, dict):
        return schedule
    if isinstance(schedule, (bytes, bytearray)):
        return json.loads(schedule)
    if isinstance(schedule, str) and schedule.lstrip().startswith("{"):
        return json.loads(schedule)
    if isinstance(schedule, (str, os.PathLike)):
        with open(schedule, "rb") as f:
            return json.load(f)
    raise TypeError("schedule: a path, JSON text or a dict, not %s" % type(schedule).__name__)
