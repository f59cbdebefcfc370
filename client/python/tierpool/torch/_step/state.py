"""State dicts between steps: between its uses a held parameter's storage is a placeholder and a
held optimizer state an empty tensor, so ``model.state_dict()``, ``optimizer.state_dict()`` and
their ``load_state_dict`` are routed through tierpool: a state dict gets copies read from it,
and a loaded one is written to it.

Every module with parameters of its own that the job holds has its ``_save_to_state_dict`` and
``_load_from_state_dict`` wrapped (what ``state_dict`` and ``load_state_dict`` call for each
module, whichever module they start from); the optimizer's two methods are wrapped. A tied
parameter is read once per module that owns it: the state dict holds equal copies, not one
tensor."""

import functools

import torch

from ...client import Tier


class StateDicts:
    def __init__(self, job, modules, optimizer):
        self.job = job
        self.optimizer = optimizer
        self._undo = []
        for m in modules:
            own = [job.params.index_of(p) for p in m.parameters(recurse=False)]
            own = [i for i in own if i is not None]
            if not own:
                continue
            self._wrap(m, "_save_to_state_dict", functools.partial(self._save, own))
            self._wrap(m, "_load_from_state_dict", functools.partial(self._load, own))
        self._wrap(optimizer, "state_dict", self._optimizer_state_dict)
        self._wrap(optimizer, "load_state_dict", self._optimizer_load)

    def _wrap(self, obj, name, fn):
        original = getattr(obj, name)
        setattr(obj, name, functools.partial(fn, original))
        self._undo.append((obj, name))

    def remove(self):
        for obj, name in self._undo:
            try:
                delattr(obj, name)  # the class's method again
            except AttributeError:
                pass
        self._undo.clear()

    # ---- parameters ----

    def _copies(self, indexes):
        """Gives each held parameter of ``indexes`` (not read in now) a copy of its tierpool
        object as its storage; returns [(HeldParam, copy)]."""
        job = self.job
        out = []
        for i in indexes:
            if i in job.params.live:
                continue  # a step reads it now: its view stands
            h = job.params.held[i]
            t = torch.empty(h.shape, dtype=h.dtype)
            job.client.get_into(h.key, t)
            h.param.data = t
            out.append((h, t))
        return out

    def _restore(self, copies):
        for h, _ in copies:
            h.param.data = h.placeholder

    def _save(self, indexes, original, destination, prefix, keep_vars):
        if not self.job.holding():
            return original(destination, prefix, keep_vars)
        copies = self._copies(indexes)
        try:
            return original(destination, prefix, keep_vars)
        finally:
            self._restore(copies)

    def _load(self, indexes, original, state_dict, prefix, *args, **kwargs):
        if not self.job.holding():
            return original(state_dict, prefix, *args, **kwargs)
        copies = self._copies(indexes)
        try:
            result = original(state_dict, prefix, *args, **kwargs)
            for h, t in copies:  # written back in the memory tier it was in
                tier = self.job.client.stat(h.key).tier
                self.job.client.put(h.key, t, kind="weight",
                                    tier=tier if tier in (Tier.HBM, Tier.DRAM) else None)
            return result
        finally:
            self._restore(copies)

    # ---- optimizer states ----

    def _optimizer_state_dict(self, original):
        job = self.job
        if not job.holding():
            return original()
        state = self.optimizer.state
        installed = []
        for i in list(job.updates.held):
            p = job.params.held[i].param
            for s, t in job.updates.read_in(i):
                state[p][s.name] = t
                installed.append((p, s))
        try:
            sd = original()
            # Its per-parameter dicts are the optimizer's own: copied before the placeholders
            # go back.
            sd["state"] = {k: dict(v) for k, v in sd["state"].items()}
            return sd
        finally:
            for p, s in installed:
                state[p][s.name] = s.placeholder

    def _optimizer_load(self, original, state_dict):
        job = self.job
        result = original(state_dict)
        if job.holding():
            job.move_states_in()  # the loaded states, as the optimizer made them, to tierpool
        return result
