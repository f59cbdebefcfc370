"""Optimizer-state offload: a torch.optim optimizer's state lives in tierpool between steps."""

import os

import torch

from . import _tensors


class _OptimizerOffload:
    """Wraps ``step`` and ``state_dict`` of one optimizer (see ``offload_optimizer``)."""

    def __init__(self, optimizer, client, prefix, min_bytes, chunk_bytes):
        self.optimizer = optimizer
        self.client = client
        self.prefix = prefix
        self.min_bytes = min_bytes
        self.chunk_bytes = chunk_bytes
        self.offloaded = {}  # (param index, state name) -> (shape, dtype)
        self.index = {}
        self.offloaded_bytes = 0
        self._step = optimizer.step
        self._state_dict = optimizer.state_dict
        self._load_state_dict = optimizer.load_state_dict

    def _params(self):
        n = 0
        for group in self.optimizer.param_groups:
            for p in group["params"]:
                self.index.setdefault(p, n)
                n += 1

    def _key(self, i, name):
        return "%s/%d/%s" % (self.prefix, i, name)

    def _chunks(self):
        """(group, params) pieces of at most chunk_bytes of parameters each, group by group."""
        for group in self.optimizer.param_groups:
            piece, size = [], 0
            for p in group["params"]:
                piece.append(p)
                size += p.numel() * p.element_size()
                if size >= self.chunk_bytes:
                    yield group, piece
                    piece, size = [], 0
            if piece:
                yield group, piece

    def _start_fetch(self, params):
        """Starts reading the offloaded states of params; returns what to wait on."""
        jobs = []
        for p in params:
            i = self.index[p]
            state = self.optimizer.state.get(p)
            if not state:
                continue
            for name in list(state):
                if (i, name) not in self.offloaded:
                    continue
                shape, dtype = self.offloaded[(i, name)]
                host = torch.empty(shape, dtype=dtype)
                jobs.append((p, name, host, self.client.get_into_async(self._key(i, name), host)))
        return jobs

    def _finish_fetch(self, jobs):
        for p, name, host, fut in jobs:
            fut.result()
            self.optimizer.state[p][name] = host.to(p.device) if p.device.type != "cpu" else host

    def _offload(self, params):
        puts = []
        for p in params:
            i = self.index[p]
            for name, t in self.optimizer.state.get(p, {}).items():
                if not torch.is_tensor(t) or t.numel() * t.element_size() < self.min_bytes:
                    continue
                host = t.detach().contiguous()
                if host.device.type != "cpu":
                    host = host.cpu()
                puts.append(((i, name), t, self.client.put_async(
                    self._key(i, name), host, kind="optimizer_state", durability="retained")))
        for _, _, fut in puts:
            fut.result()  # every write is acknowledged before its tensor is dropped
        for (i, name), t, _ in puts:
            if (i, name) not in self.offloaded:
                self.offloaded_bytes += t.numel() * t.element_size()
            self.offloaded[(i, name)] = (tuple(t.shape), t.dtype)
        for p in params:
            state = self.optimizer.state.get(p, {})
            for name in list(state):
                if (self.index[p], name) in self.offloaded:
                    state[name] = _placeholder(state[name])

    def step(self, closure=None):
        self._params()
        if closure is not None:  # a closure may look at every group: bring everything in
            everything = [p for g in self.optimizer.param_groups for p in g["params"]]
            self._finish_fetch(self._start_fetch(everything))
            loss = self._step(closure)
            self._offload(everything)
            return loss
        groups = self.optimizer.param_groups
        chunks = list(self._chunks())
        pending = self._start_fetch(chunks[0][1]) if chunks else []
        try:
            for n, (group, params) in enumerate(chunks):
                self._finish_fetch(pending)
                pending = self._start_fetch(chunks[n + 1][1]) if n + 1 < len(chunks) else []
                self.optimizer.param_groups = [dict(group, params=params)]
                try:
                    self._step()
                finally:
                    self.optimizer.param_groups = groups
                self._offload(params)
        finally:
            for _, _, _, fut in pending:
                fut.result()
        return None

    def state_dict(self):
        """The optimizer's state dict with the offloaded tensors read back (a copy)."""
        self._params()
        saved = {}
        everything = [p for g in self.optimizer.param_groups for p in g["params"]]
        for p, name, host, fut in self._start_fetch(everything):
            fut.result()
            saved[(p, name)] = self.optimizer.state[p][name]
            self.optimizer.state[p][name] = host
        try:
            sd = self._state_dict()
            # Its per-parameter dicts are the optimizer's own: copy them before the
            # placeholders go back.
            sd["state"] = {k: dict(v) for k, v in sd["state"].items()}
            return sd
        finally:
            for (p, name), placeholder in saved.items():
                self.optimizer.state[p][name] = placeholder

    def load_state_dict(self, state_dict):
        self._load_state_dict(state_dict)
        self.offloaded.clear()
        self.offloaded_bytes = 0
        self._params()
        self._offload([p for g in self.optimizer.param_groups for p in g["params"]])


def _placeholder(t):
    """An empty tensor standing for an offloaded one between steps (dtype and device kept)."""
    return torch.empty(0, dtype=t.dtype, device=t.device)


def offload_optimizer(optimizer, client, *, prefix=None, min_bytes=4096, chunk_bytes=64 << 20):
    """Keeps the state tensors of ``optimizer`` (any ``torch.optim`` optimizer that updates each
    parameter on its own: SGD, Adam, AdamW, RMSprop, Adagrad...) in tierpool between steps.
    ``step()`` streams them in, group by group in pieces of ``chunk_bytes`` of parameters, the
    next piece read while the current one steps, and writes them back; the results are
    identical to the plain optimizer's. States under ``min_bytes`` (Adam's step count) stay in
    memory. ``state_dict()`` and ``load_state_dict()`` see the real tensors. Returns the same
    optimizer, with ``optimizer.tierpool`` holding the offload's counters."""
    off = _OptimizerOffload(optimizer, client,
                            prefix or "optim/%d.%d" % (os.getpid(), id(optimizer)),
                            int(min_bytes), int(chunk_bytes))
    optimizer.step = off.step
    optimizer.state_dict = off.state_dict
    optimizer.load_state_dict = off.load_state_dict
    optimizer.tierpool = off
    return optimizer
