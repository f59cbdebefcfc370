"""The job's first training step, observed: its steps, the tensors they define and use, and how
long each took. From it come the schedule the planner plans (protobuf's JSON mapping of
prefetch/proto/schedule.proto) and what the job needs to carry the plan out: which event starts
which step, which parameters a forward step reads, which saved tensors a backward step reads.

The events are those the job sees at run time too, so that the recorded steps are met again by
construction, not matched by size: a module's forward starting or ending, the first read of a
saved tensor in backward, an optimizer update of one parameter. Between two events is an
interval; an interval that touches nothing the job holds joins the step before it, unpacks of
the tensors one forward step saved make one backward step, and each update is a step.

Times are wall time, measured (``Step.measured``): the planner keeps them as they are.
"""

import bisect
import collections

FORWARD, BACKWARD, UPDATE = "forward", "backward", "update"

# The server holds each object in extents of 4 KiB: the schedule counts what they hold.
EXTENT = 4096

# Schedule tensor kinds (schedule.proto's TensorKind names).
WEIGHT, GRADIENT, STATE, SAVED, WORKSPACE = ("WEIGHT", "GRADIENT", "OPTIMIZER_STATE",
                                              "SAVED_ACTIVATION", "OTHER")


class Tensor:
    """One tensor the job holds in tierpool, as the schedule names it (its key is its name)."""

    __slots__ = ("id", "key", "kind", "nbytes", "dtype", "shape", "def_step", "uses", "updates")

    def __init__(self, tid, key, kind, nbytes, dtype, shape, def_step):
        self.id, self.key, self.kind, self.nbytes = tid, key, kind, int(nbytes)
        self.dtype, self.shape, self.def_step = dtype, [int(d) for d in shape], def_step
        self.uses = []  # interval indexes while recording, step indexes once built
        self.updates = []


class _Interval:
    __slots__ = ("event", "label", "phase", "t0", "params", "defs", "uses", "updates", "owner",
                 "outside")

    def __init__(self, event, label, phase, t0, owner=None):
        self.event, self.label, self.phase, self.t0, self.owner = event, label, phase, t0, owner
        self.outside = 0  # the most the trainer held outside tierpool meanwhile
        self.params = set()  # parameter indexes forward ops read here
        self.defs, self.uses, self.updates = [], [], []

    def empty(self):
        return not (self.params or self.defs or self.uses or self.updates)


class Pack:
    """What one pack (a saved tensor the job holds, or a reference to a parameter) was."""

    __slots__ = ("tensor", "param", "interval", "nbytes", "dtype", "shape")

    def __init__(self, tensor, param, interval, nbytes, dtype, shape):
        self.tensor, self.param, self.interval = tensor, param, interval
        self.nbytes, self.dtype, self.shape = nbytes, dtype, tuple(shape)


class Recording:
    """Collects one iteration's events (``event``, ``use_param``, ``pack``, ``unpack``, ``grad``,
    ``update``) and builds the schedule from them (``build``)."""

    def __init__(self, prefix, params):
        """``params``: one (name, nbytes, dtype name, shape) per parameter the job holds, by
        index."""
        self.prefix = prefix
        self.tensors = []
        self.intervals = []
        self.packs = []
        self.param_tensor = [self._tensor("%s/w/%s" % (prefix, name), WEIGHT, n, dt, sh, -1)
                             for name, n, dt, sh in params]
        self.param_names = [p[0] for p in params]
        self.grad_tensor = {}  # param index -> tensor id
        self.state_tensor = {}  # (param index, state name) -> tensor id
        self.module_params = collections.defaultdict(set)  # module index -> params it reads
        self.recipes = {}  # pack sequence number -> the recipe that can make it again
        self.t_end = None

    def _tensor(self, key, kind, nbytes, dtype, shape, def_step):
        t = Tensor(len(self.tensors), key, kind, nbytes, dtype, shape, def_step)
        self.tensors.append(t)
        return t.id

    @property
    def current(self):
        return self.intervals[-1] if self.intervals else None

    # ---- what the job tells it ----

    def event(self, kind, ident, label, phase, now, owner=None):
        self.intervals.append(_Interval((kind, ident), label, phase, now, owner))

    def note_outside(self, nbytes):
        """The most the trainer held outside tierpool since the last note, counted for the
        interval now ending."""
        if self.intervals:
            self.current.outside = max(self.current.outside, int(nbytes))

    def outside_peak(self):
        """(the most held outside tierpool in any interval, that interval's label)."""
        return max(((iv.outside, iv.label) for iv in self.intervals), default=(0, ""))

    def use_param(self, pidx, module):
        if self.intervals:
            self.current.params.add(pidx)
        if module is not None:
            self.module_params[module].add(pidx)

    def pack(self, nbytes, dtype, shape, label, param=None):
        """A saved tensor the job will hold (param None: an activation) or a reference to a
        parameter; returns its pack sequence number."""
        here = len(self.intervals) - 1
        tid = None
        if param is None:
            key = "%s/a/%d.%s" % (self.prefix, len(self.packs), label)
            tid = self._tensor(key, SAVED, nbytes, dtype, shape, here)
            self.current.defs.append(tid)
        self.packs.append(Pack(tid, param, here, nbytes, dtype, shape))
        return len(self.packs) - 1

    def unpack(self, seq, now):
        """The first read of pack ``seq`` in backward: an event."""
        p = self.packs[seq]
        self.event("unpack", seq, self.intervals[p.interval].label, BACKWARD, now, owner=p.interval)
        tid = p.tensor if p.tensor is not None else self.param_tensor[p.param]
        self.current.uses.append(tid)

    def grad(self, pidx, nbytes, dtype, shape):
        """A gradient accumulated into parameter ``pidx``'s (the first this iteration defines
        it; later ones read and replace it, with room for the sum beside it)."""
        here = len(self.intervals) - 1
        tid = self.grad_tensor.get(pidx)
        if tid is None:
            key = "%s/g/%s" % (self.prefix, self.param_names[pidx])
            self.grad_tensor[pidx] = self._tensor(key, GRADIENT, nbytes, dtype, shape, here)
            self.current.defs.append(self.grad_tensor[pidx])
            return
        self.current.uses.append(tid)
        self.current.updates.append(tid)
        self._workspace("fold.%s" % self.param_names[pidx], nbytes)

    def update(self, pidx, now):
        """Parameter ``pidx``'s optimizer update, an event: it reads the parameter and its
        gradient and writes the parameter."""
        self.event("update", pidx, self.param_names[pidx], UPDATE, now)
        cur = self.current
        w = self.param_tensor[pidx]
        cur.uses.append(w)
        cur.updates.append(w)
        if pidx in self.grad_tensor:
            cur.uses.append(self.grad_tensor[pidx])

    def update_states(self, pidx, states):
        """The update's optimizer states the job holds: (name, nbytes, dtype, shape) each. An
        update writes a new copy of the parameter and of each state (a two-phase write), one at
        a time, each old one deleted once copied: its step has room for the largest beside
        them."""
        name = self.param_names[pidx]
        cur = self.current
        room = self.tensors[self.param_tensor[pidx]].nbytes
        for sname, nbytes, dtype, shape in states:
            tid = self.state_tensor.get((pidx, sname))
            if tid is None:
                key = "%s/s/%s/%s" % (self.prefix, name, sname)
                tid = self.state_tensor[(pidx, sname)] = self._tensor(key, STATE, nbytes, dtype,
                                                                      shape, -1)
            cur.uses.append(tid)
            cur.updates.append(tid)
            room = max(room, nbytes)
        self._workspace("update.%s" % name, room)

    def _workspace(self, label, nbytes):
        here = len(self.intervals) - 1
        key = "%s/tmp/%d.%s" % (self.prefix, len(self.tensors), label)
        self.current.defs.append(self._tensor(key, WORKSPACE, nbytes, "uint8", [nbytes], here))

    def end(self, now):
        self.t_end = now

    # ---- the schedule ----

    def build(self, name):
        """Merges the intervals into steps; returns a ``Layout``."""
        step_of = []
        steps = []  # [label, phase, seconds, owner, first interval]
        for k, iv in enumerate(self.intervals):
            t1 = self.intervals[k + 1].t0 if k + 1 < len(self.intervals) else self.t_end
            prev = steps[-1] if steps else None
            if prev is None:
                join = False
            elif iv.event[0] == "unpack":
                join = prev[1] == BACKWARD and prev[3] == iv.owner
            elif iv.event[0] == "update":
                join = False
            else:
                join = iv.empty()
            if join:
                prev[2] += t1 - iv.t0
            else:
                steps.append([iv.label, iv.phase, t1 - iv.t0, iv.owner, k])
            step_of.append(len(steps) - 1)

        for t in self.tensors:
            if t.def_step >= 0:
                t.def_step = step_of[t.def_step]
        uses = collections.defaultdict(set)
        updates = collections.defaultdict(set)
        step_params = [set() for _ in steps]
        for k, iv in enumerate(self.intervals):
            s = step_of[k]
            for pidx in iv.params:
                uses[self.param_tensor[pidx]].add(s)
                step_params[s].add(pidx)
            for tid in iv.uses:
                uses[tid].add(s)
            for tid in iv.updates:
                updates[tid].add(s)
        for t in self.tensors:
            t.uses = sorted(u for u in uses[t.id] if u > t.def_step)
            t.updates = sorted(updates[t.id])

        # A backward step's reads, fetched at once as it starts.
        step_reads = [[] for _ in steps]
        for k, iv in enumerate(self.intervals):
            if iv.event[0] == "unpack":
                step_reads[step_of[k]].append(iv.event[1])
        for s, (label, phase, _, owner, _) in enumerate(steps):
            if phase == BACKWARD:
                steps[s][0] = self.intervals[owner].label if owner is not None else label
        return Layout(self, name, steps, step_of, [sorted(p) for p in step_params], step_reads)


class Layout:
    """The recorded iteration as the job carries it out: the schedule, the event that starts
    each step, and what each step reads."""

    def __init__(self, rec, name, steps, step_of, step_params, step_reads):
        self.name = name
        self.tensors = rec.tensors
        self.packs = rec.packs
        self.events = [iv.event for iv in rec.intervals]
        self.event_step = step_of
        self.steps = [(label, phase, seconds) for label, phase, seconds, _, _ in steps]
        self.step_params = step_params
        self.step_reads = step_reads
        self.param_tensor = rec.param_tensor
        self.grad_tensor = dict(rec.grad_tensor)
        self.state_tensor = dict(rec.state_tensor)
        self.module_params = {m: sorted(p) for m, p in rec.module_params.items()}
        self.update_step = {ev[1]: step_of[k] for k, ev in enumerate(self.events)
                            if ev[0] == "update"}
        self._use_steps = sorted({u for t in self.tensors for u in t.uses})
        self.recipes = rec.recipes
        self.recomputed = {}  # pack sequence number -> (the step it is made at, its copy's key)
        self.recomputes_at = collections.defaultdict(list)  # step -> pack sequence numbers

    def set_recomputes(self, recomputes):
        """The plan's recomputes (schedule.proto's ``Recompute``: tensor, at_step)."""
        seq_of = {p.tensor: seq for seq, p in enumerate(self.packs) if p.tensor is not None}
        for r in recomputes:
            tid, at = int(r.get("tensor", 0)), int(r.get("at_step", 0))
            seq = seq_of.get(tid)
            if seq is None or seq not in self.recipes:
                raise ValueError("the plan recomputes tensor %d, which has no recipe" % tid)
            self.recomputed[seq] = (at, self.tensors[tid].key + "@recompute")
            self.recomputes_at[at].append(seq)

    def read_key(self, seq, step):
        """The key backward reads pack ``seq`` from at ``step``: its copy's once it is made."""
        made = self.recomputed.get(seq)
        if made is not None and step > made[0]:
            return made[1]
        return self.key(self.packs[seq].tensor)

    def used_before(self, seq, step):
        """Whether a step before ``step`` reads pack ``seq`` (after the one that saves it)."""
        t = self.tensors[self.packs[seq].tensor]
        return any(u < step for u in t.uses)

    def key(self, tid):
        return self.tensors[tid].key

    def held(self, kind=None):
        return [t for t in self.tensors if t.kind != WORKSPACE and (kind is None or t.kind == kind)]

    def schedule(self, recipes=False):
        """The schedule in protobuf's JSON mapping (repeating: a training loop); with
        ``recipes``, the recipe of each saved activation that has one, and only those may be
        recomputed."""
        steps = []
        for s, (label, phase, seconds) in enumerate(self.steps):
            touched = sum(extent_bytes(self.tensors[t].nbytes) for t in self._touched(s))
            steps.append({"name": "%s %s" % (phase, label), "op_type": phase,
                          "compute_us": max(seconds, 0.0) * 1e6, "measured": True,
                          "bytes_touched": str(touched)})
        tensors = []
        for t in self.tensors:
            d = {"id": t.id, "name": t.key, "size_bytes": str(extent_bytes(t.nbytes)),
                 "dtype": t.dtype,
                 "shape": [str(x) for x in t.shape], "kind": t.kind, "def_step": t.def_step,
                 "use_steps": t.uses}
            if t.updates:
                d["update_steps"] = t.updates
            tensors.append(d)
        if recipes:
            for seq, r in self.recipes.items():
                inputs = [self.packs[i].tensor for i in r.saved_inputs()]
                inputs += [self.param_tensor[i] for i in r.param_inputs()]
                tensors[self.packs[seq].tensor]["recipe"] = {
                    "inputs": sorted(set(inputs)), "compute_us": max(r.seconds, 0.0) * 1e6}
        return {"format_version": 1, "name": self.name, "source": "tierpool.torch.offload",
                "repeats": True, "steps": steps, "tensors": tensors, "recipes_only": recipes}

    def _touched(self, s):
        if not hasattr(self, "_touch"):
            self._touch = collections.defaultdict(set)
            for t in self.tensors:
                if t.def_step >= 0:
                    self._touch[t.def_step].add(t.id)
                for u in t.uses:
                    self._touch[u].add(t.id)
        return self._touch[s]

    def floor(self):
        """(the most bytes one step holds in hbm at once, that step): no plan keeps a budget
        below it."""
        best = (0, 0)
        for s in range(len(self.steps)):
            best = max(best, (sum(extent_bytes(self.tensors[t].nbytes) for t in self._touched(s)),
                              s))
        return best

    def next_use_after(self, step):
        """The first step after ``step`` that reads a tensor the job holds, or None."""
        i = bisect.bisect_right(self._use_steps, step)
        return self._use_steps[i] if i < len(self._use_steps) else None


def extent_bytes(n):
    return (int(n) + EXTENT - 1) // EXTENT * EXTENT
