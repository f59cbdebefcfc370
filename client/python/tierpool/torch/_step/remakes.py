"""The job's recomputes (recipes.py says what a recipe is and why it gives the same bytes).

While the first step is recorded, the recipes of the saved activations are noted; from the second
step on, a saved activation the plan recomputes is armed when it is saved (its recipe and the refs
of its inputs kept, its bytes not stored unless a step before the recompute reads them), made at
the plan's step and put where backward reads it, or, in a step that left the recorded one, made
when backward reads it.

Locking: none; the job's thread only.
"""

from ... import _errors
from . import recipes, views


def parse_share(share):
    """``recompute``: a share of the step's compute, "5%" or 0.05 (0: recompute nothing)."""
    if isinstance(share, str):
        text = share.strip()
        try:
            f = float(text[:-1]) / 100 if text.endswith("%") else float(text)
        except ValueError:
            f = -1
    elif isinstance(share, (int, float)) and not isinstance(share, bool):
        f = float(share)
    else:
        f = -1
    if not 0 <= f <= 1:
        raise _errors.InvalidArgument("recompute %r: a share of the step's compute in [0, 1] "
                                      "(\"5%%\" or 0.05)" % (share,), 1)
    return f


class Remakes:
    """One job's recomputes: ``share`` of the step's compute the plan may spend on them."""

    def __init__(self, job, share):
        self.job = job
        self.share = share
        self.producers = None  # recipes.Producers, while the first step is recorded
        self._param_by_ptr = {}
        self.made = self.made_late = 0  # this iteration's, at their steps / when read

    def new_iteration(self):
        self.made = self.made_late = 0

    # ---- the recorded step ----

    def start_recording(self):
        if self.share > 0:
            self._param_by_ptr = {h.param.data_ptr(): h.index for h in self.job.params.held}
            self.producers = recipes.Producers(self._held_param_at, self._model_tensors())

    def stop_recording(self):
        self.producers = None

    def note_saved(self, t, seq):
        """Autograd saved ``t`` as pack ``seq``: its recipe, if it has one, goes into the
        recording."""
        if self.producers is not None:
            recipe = self.producers.saved(t, seq)
            if recipe is not None:
                self.job.rec.recipes[seq] = recipe

    def _held_param_at(self, t):
        """The held parameter ``t`` is, whole and as it is laid out (index), or None."""
        i = self._param_by_ptr.get(t.data_ptr())
        if i is None:
            return None
        p = self.job.params.held[i].param
        # Its tierpool copy is dense: a recompute reads it so, as the op read it.
        same = (t.data_ptr() == p.data_ptr() and tuple(t.shape) == tuple(p.shape) and
                tuple(t.stride()) == tuple(p.stride()) and p.is_contiguous())
        return i if same else None

    def _model_tensors(self):
        """{identity: name} of the model's parameters the job does not hold (a norm's small
        weight): a recipe reads them by name. Not buffers: forward may change those in place
        (running statistics) after an op read them."""
        held = {id(h.param) for h in self.job.params.held}
        out = {}
        for name, p in self.job.model.named_parameters():
            if id(p) not in held:
                out.setdefault(recipes.identity(p), name)
        return out

    # ---- planned steps ----

    def arm(self, ref):
        """``ref`` was saved under its planned key: if the plan recomputes it and its inputs are
        stored, it gets its Remake. Returns whether its bytes need not be stored (no step before
        the recompute reads them)."""
        layout = self.job.layout
        if ref.seq not in layout.recomputed:
            return False
        at, copy_key = layout.recomputed[ref.seq]
        recipe = layout.recipes[ref.seq]
        saved = self.job.saved
        if saved.key_in_use(copy_key):
            return False  # an earlier forward's copy, not read yet
        inputs = {}
        for seq in recipe.saved_inputs():
            r = saved.ref_of(seq)
            if r is None or r.key is None or r.remake is not None:
                return False
            inputs[seq] = r
        versions = {name: self.job.model.get_parameter(name)._version
                    for name in recipe.model_inputs()}
        ref.remake = recipes.Remake(recipe, inputs, versions, copy_key, at)
        return not layout.used_before(ref.seq, at)

    def make_at(self, step):
        """The recomputes the plan makes at ``step``: each op run again, its output put where
        backward will read it."""
        job = self.job
        for seq in job.layout.recomputes_at.get(step, ()):
            ref = job.saved.ref_of(seq)
            if ref is None or ref.remake is None or ref.remake.made:
                continue
            stored = self._make(ref)
            job.client.put(ref.remake.copy_key, stored, kind="activation", tier="hbm")
            job.saved.rekey(ref, ref.remake.copy_key)
            self.made += 1

    def make_unmade(self, ref):
        """Backward reads ``ref`` before its recompute's step came (the step left the recorded
        one): the tensor, made here and kept by the trainer for its one read; else None."""
        if ref.remake is None or ref.remake.made:
            return None
        self.made_late += 1
        return self._make(ref)

    def _make(self, ref):
        """The tensor ``ref`` saved, made again from its inputs' copies, in its dense order."""
        job, rm = self.job, ref.remake

        def value_of(kind, what):
            if kind == recipes.SAVED:
                seq, shape = what
                r = rm.inputs[seq]
                t = job.read_view(r.key, r.dtype, r.shape)
                t = t if r.restore is None else t.permute(r.restore)
                return t if tuple(t.shape) == shape else t.view(shape)
            if kind == recipes.PARAM:
                return job.read_param(what)
            p = job.model.get_parameter(what)
            if p._version != rm.versions[what]:
                # Its bytes as the op read them are gone: no recompute gives them back.
                raise _errors.FailedPrecondition(
                    "parameter %s changed in place between saved tensor %d's forward and its "
                    "recompute; offload this job without recompute" % (what, ref.seq), 5)
            return p.detach()

        stored, _ = views.dense(rm.recipe.run(value_of))
        if tuple(stored.shape) != ref.shape or stored.dtype != ref.dtype:
            raise _errors.Internal("recomputing saved tensor %d made %s %s, not %s %s"
                                   % (ref.seq, views.dtype_name(stored.dtype),
                                      list(stored.shape), views.dtype_name(ref.dtype),
                                      list(ref.shape)), 8)
        rm.made, rm.inputs = True, None  # its inputs' refs let go
        return stored
