"""The parameters a job holds: in tierpool between uses, their storage a view of the hbm copy
while a step reads them (as FSDP and ZeRO-3 swap parameter storage), an empty placeholder
otherwise."""

import torch

from . import views


class HeldParam:
    __slots__ = ("index", "name", "param", "key", "dtype", "shape", "nbytes", "placeholder")

    def __init__(self, index, name, param, key):
        self.index, self.name, self.param, self.key = index, name, param, key
        self.dtype, self.shape, self.nbytes = param.dtype, tuple(param.shape), views.nbytes(param)
        self.placeholder = placeholder(param)


def placeholder(param):
    """What a parameter's storage is between its uses: one NaN seen through every index (no
    memory, its shape kept: autograd's AccumulateGrad reads the parameter's shape). Code that
    reads the parameter then (a norm for logging, say) gets NaN, not a plausible number."""
    if param.numel() == 0 or not param.is_floating_point():
        return torch.empty(param.shape, dtype=param.dtype, device=param.device)
    one = torch.full((1,) * max(param.dim(), 1), float("nan"), dtype=param.dtype,
                     device=param.device)
    return one.expand(param.shape) if param.dim() else one.reshape(())


class Params:
    """Held parameters by index; which of them have a view as their storage now (``live``).

    Views are taken in one round trip for a step (``materialize``) and let go by setting the
    placeholder back (the pin goes with the last tensor over the view)."""

    def __init__(self, job, held):
        self.job = job
        self.held = held  # [HeldParam]
        self.by_id = {id(h.param): h.index for h in held}
        self.live = {}  # index -> the tensor over its view
        self.eval_refs = {}  # index -> materializations outside a training step

    def index_of(self, t):
        """The held parameter ``t`` is, or is a view of (None for any other tensor)."""
        i = self.by_id.get(id(t))
        if i is None and t._base is not None:
            i = self.by_id.get(id(t._base))
        return i

    def materialize(self, indexes):
        """Gives each parameter of ``indexes`` its hbm copy as storage (one round trip)."""
        need = [i for i in indexes if i not in self.live]
        if not need:
            return
        for i, t in zip(need, self.job.read_views([self.held[i].key for i in need],
                                                 [(self.held[i].dtype, self.held[i].shape)
                                                  for i in need])):
            self.held[i].param.data = t
            self.live[i] = t

    def release(self, keep=()):
        """Lets go of the views of every live parameter not in ``keep``."""
        for i in [i for i in self.live if i not in keep and i not in self.eval_refs]:
            self.held[i].param.data = self.held[i].placeholder
            del self.live[i]

    # ---- outside a training step (evaluation under no_grad): per module, nested ----

    def enter_module(self, indexes):
        fresh = [i for i in indexes if i not in self.live]
        self.materialize(fresh)
        for i in indexes:
            self.eval_refs[i] = self.eval_refs.get(i, 0) + 1

    def exit_module(self, indexes):
        for i in indexes:
            n = self.eval_refs.get(i, 0) - 1
            if n > 0:
                self.eval_refs[i] = n
            else:
                self.eval_refs.pop(i, None)
        self.release(keep=())
