"""Activation offload: saved tensors go to tierpool in forward and come back in backward."""

import bisect
import itertools
import os
import threading
import weakref

import torch

from . import _device, _tensors
from ..client import DeviceView
from .plans import ActivationPlan, _Matcher

_contexts = itertools.count()


class _Saved:
    """What autograd keeps instead of a saved tensor: its key and how to rebuild it."""

    __slots__ = ("ctx", "key", "shape", "dtype", "device", "order", "nbytes", "index", "slot",
                 "iteration", "pending", "fetched", "used", "last", "on_device", "__weakref__")

    def __del__(self):
        ctx = self.ctx
        if ctx is not None:
            ctx._forget(self)


class offload_activations:
    """Moves each tensor autograd saves in forward (at least ``min_bytes``) into tierpool, and
    brings it back when backward needs it. Use around the forward pass:

        with tierpool.torch.offload_activations(client):
            loss = model(x)
        loss.backward()

    Results are bit-identical to running without it. Puts run on the client's threads while
    forward goes on (at most ``inflight_bytes`` of those through host memory in flight; puts into
    the server's device arena hold no host memory and are not held back); in backward the
    tensors are fetched in reverse order of saving, ``prefetch_bytes`` ahead of the one being
    used.

    With ``plan`` (a ``tierpool.Plan`` registered from `tierpool schedule from-torch` of this
    model) and ``schedule`` (that schedule's JSON, or a ``tierpool.torch.ActivationPlan``),
    each saved tensor is stored under its schedule tensor's name and each save and first use
    reports the job's progress, so that the server's executor brings the tensors up ahead of
    backward. ``plan_keys`` and ``plan_steps`` give the same by hand: one key and one (saving
    step, first backward step) per offloaded tensor, in saving order.

    On a server whose hbm is the GPU's own memory (``tierpoold --hbm-device N``, this package
    built with ``-DTIERPOOL_CUDA=ON``), CUDA tensors on that GPU go into the server's device
    arena (``device_hbm``, default True): the GPU copies each into a device reservation, the
    server moves them to dram and back on the GPU's copy engines as hbm fills and backward
    asks for them, and backward's reads are device-to-device copies. No byte of them crosses
    the host in this process.

    Parameters (leaf tensors that require grad, and views of them) are never offloaded: they
    stay in memory anyway. Objects are deleted from tierpool when autograd frees them.
    """

    def __init__(self, client, min_bytes=1 << 20, plan=None, *, schedule=None, plan_keys=None,
                 plan_steps=None, prefix=None, prefetch_bytes=64 << 20, inflight_bytes=64 << 20,
                 durability="retained", device_hbm=True):
        self.client = client
        # The CUDA device whose tensors go to the server's device hbm; None: every tensor
        # through host memory.
        self.hbm_device = client.hbm_device if device_hbm else None
        self._releasing = []      # (event, device view): released once the copy from it is done
        self.min_bytes = int(min_bytes)
        self.plan = plan
        if schedule is not None and plan_keys is not None:
            raise ValueError("give schedule or plan_keys, not both")
        if isinstance(schedule, ActivationPlan):
            layout = schedule
        elif schedule is not None:
            layout = ActivationPlan.from_schedule(schedule, min_bytes=self.min_bytes)
        elif plan_keys is not None:
            layout = ActivationPlan(plan_keys, None, plan_steps)
        else:
            layout = None
        self.layout = layout
        self._matcher = _Matcher(layout) if layout is not None else None
        # The planned backward reads' steps, sorted: _report_ahead looks up the next one.
        self._use_steps = sorted(u for _, u in layout.steps) if layout is not None and layout.steps else []
        self.unplanned = 0        # offloaded tensors no plan entry matched
        self.prefix = prefix or "act/%d.%d" % (os.getpid(), next(_contexts))
        self.prefetch_bytes = int(prefetch_bytes)
        self.inflight_bytes = int(inflight_bytes)
        self.durability = durability
        self._lock = threading.Lock()
        self._alive = {}          # index -> weak reference to its _Saved, while autograd holds it
        self._owner = {}          # key -> index of the _Saved that last stored it
        self._saved_of = {}       # id(tensor) -> (weakref to it, its version, weakref to _Saved)
        self._counter = 0
        self._inflight = []       # _Saved whose put is still running
        self._garbage = []        # keys autograd no longer needs, deleted in batches
        self._iteration = 0
        self._hooks = None
        self.offloaded_bytes = 0  # since creation
        self.fetched_bytes = 0

    # ---- the context ----

    def __enter__(self):
        if self._matcher is not None:
            self._matcher.reset()
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc):
        self._hooks.__exit__(*exc)
        self._hooks = None
        self._iteration += 1
        return False

    def flush(self):
        """Waits for the puts in flight and deletes what autograd has freed."""
        for s in list(self._inflight):
            self._wait_put(s)
        self._release_views(wait=True)
        self._collect(force=True)

    # ---- hooks ----

    def _keep(self, t):
        if t.numel() * t.element_size() < self.min_bytes:
            return True
        if t.is_leaf and t.requires_grad:
            return True  # a parameter
        base = t._base
        return base is not None and base.is_leaf and base.requires_grad

    def _pack(self, t):
        if self._keep(t):
            return t
        # A tensor saved twice (a ReLU's output, saved by the ReLU and by the next Linear) is
        # stored once: both saved variables get the same _Saved.
        seen = self._saved_of.get(id(t))
        if seen is not None and seen[0]() is t and seen[1] == t._version:
            s = seen[2]()
            if s is not None:
                return s
        order = _tensors.dense_permutation(t)
        stored = t.permute(order) if order is not None else t.contiguous()
        s = _Saved()
        s.ctx = self
        s.index = self._counter
        s.iteration = self._iteration
        self._counter += 1
        s.shape, s.dtype, s.device = tuple(stored.shape), t.dtype, t.device
        s.order = order
        s.nbytes = stored.numel() * stored.element_size()
        s.slot = self._matcher.take(s.nbytes) if self._matcher is not None else None
        if self._matcher is not None and s.slot is None:
            self.unplanned += 1
        s.key = self._key(s)
        s.fetched = None
        s.pending = None
        s.used = False
        self._report(s, 0)
        # A planned tensor starts where the plan has it, in hbm; the executor offloads it when
        # the plan says so (and keeps those it can afford there).
        planned = self._planned(s)
        s.on_device = False
        if t.device.type == "cuda" and t.device.index == self.hbm_device:
            s.pending = self._put_device(s, stored)
        if s.pending is None:
            if t.device.type != "cpu":
                stored = stored.to("cpu")
            s.pending = (self.client.put_async(s.key, stored, kind="activation",
                                               durability=self.durability,
                                               tier="hbm" if planned else None), stored)
        tid = id(t)
        self._saved_of[tid] = (weakref.ref(t, lambda _, tid=tid: self._saved_of.pop(tid, None)),
                               t._version, weakref.ref(s))
        s.last = None
        with self._lock:
            self._alive[s.index] = weakref.ref(s)
            self._owner[s.key] = s.index
            self._inflight.append(s)
            self.offloaded_bytes += s.nbytes
        self._bound_inflight()
        return s

    def _unpack(self, s):
        if isinstance(s, torch.Tensor):
            return s
        self._report(s, 1)
        last = s.last() if s.last is not None else None
        if last is not None:
            return last  # the other saved variable of the same tensor already brought it back
        self._wait_put(s)
        s.used = True
        fut, s.fetched = s.fetched, None
        host = fut.result() if fut is not None else self._fetch(s)
        self._report_ahead(s)
        self._prefetch_before(s.index)
        if isinstance(host, tuple):  # a device copy: the current stream waits for it
            host = _device.ready(*host)
            self._release_views()
        out = host if s.order is None else host.permute(_tensors.inverse(s.order))
        if out.device != s.device:
            out = out.to(s.device, non_blocking=True)
        s.last = weakref.ref(out)
        return out

    # ---- moving bytes ----

    def _key(self, s):
        if s.slot is not None:
            key = self.layout.keys[s.slot]  # the same keys every iteration, as the plan names them
            with self._lock:
                prev = self._owner.get(key)
                ref = self._alive.get(prev) if prev is not None else None
            if ref is None or ref() is None:
                return key
            # Still held from an earlier forward (no backward in between): a key of its own, so
            # that one's bytes are not replaced under it.
        return "%s/%d" % (self.prefix, s.index)

    def _planned(self, s):
        """Whether the plan moves this tensor: it has a plan entry and the job reports steps."""
        return self.plan is not None and s.slot is not None and self.layout.steps is not None

    def _report(self, s, which):
        """Reports the step that saves (which=0) or first uses (1) the tensor to the plan."""
        if self._planned(s):
            self.plan.report_progress(s.iteration, self.layout.steps[s.slot][which])

    def _report_ahead(self, s):
        """After a backward read: the steps until the next planned tensor's use read nothing
        from tierpool, so the job is reported there at once; the executor starts that tensor's
        prefetch while those steps compute instead of when its own step comes."""
        if not self._planned(s):
            return
        use = self.layout.steps[s.slot][1]
        i = bisect.bisect_right(self._use_steps, use)
        if i < len(self._use_steps) and self._use_steps[i] - 1 > use:
            self.plan.report_progress(s.iteration, self._use_steps[i] - 1)

    def _put_device(self, s, stored):
        """Starts a put into the server's device hbm (s.pending), or returns None when hbm has
        no room there (then the tensor goes through host memory)."""
        r = self.client.reserve(s.key, s.nbytes, kind="activation", durability=self.durability,
                                tier="hbm", dtype=str(s.dtype).replace("torch.", ""),
                                shape=list(s.shape), device=True)
        if r.device < 0:
            r.abort()
            return None
        try:
            done = _device.write_device(r, stored)
        except BaseException:
            r.abort()
            raise
        s.on_device = True
        return (self.client.submit(_device.commit_after, done, r), None)

    def _fetch_device(self, s):
        """Copies the object's device copy into a new tensor on the GPU (the server brings it
        up first where it went down to dram): (the tensor, the copy's event), or a host tensor
        where it could not be brought into hbm."""
        v = self.client.view(s.key, tier="hbm", device=True)
        if not isinstance(v, DeviceView):
            host = _tensors.host_copy_target(s.shape, s.dtype, s.device)
            with v:
                _device.host_bytes_into(v, host)
            self.fetched_bytes += s.nbytes
            return host
        try:
            flat, done = _device.read_device(v, s.nbytes, s.device)
        except BaseException:
            v.release()
            raise
        with self._lock:
            self._releasing.append((done, v))
        self.fetched_bytes += s.nbytes
        shaped = flat.view(s.dtype).view(s.shape) if s.nbytes > 0 else flat.new_empty(
            s.shape, dtype=s.dtype)
        return shaped, done

    def _release_views(self, wait=False):
        """Releases the device views whose copies are done (every one, waiting, with wait)."""
        with self._lock:
            pending, self._releasing = self._releasing, []
        keep = []
        for done, v in pending:
            if wait:
                done.synchronize()
            if wait or done.query():
                v.release()
            else:
                keep.append((done, v))
        if keep:
            with self._lock:
                self._releasing[:0] = keep

    def _fetch(self, s):
        if s.on_device:
            return self._fetch_device(s)
        host = _tensors.host_copy_target(s.shape, s.dtype, s.device)
        # Under a plan, backward's read is the step's use of the hbm copy the executor prefetched.
        self.client.get_into(s.key, host, tier="hbm" if self._planned(s) else None)
        self.fetched_bytes += s.nbytes
        return host

    def _wait_put(self, s):
        pending = s.pending
        if pending is None:
            return
        pending[0].result()  # raises the put's error here, where autograd sees it
        s.pending = None
        with self._lock:
            if s in self._inflight:
                self._inflight.remove(s)

    def _bound_inflight(self):
        """Waits while more than inflight_bytes of puts through host memory are running. Puts
        into the device arena are not counted: their room is reserved on the GPU and the tensor
        is held only until the GPU's copy; waiting for their commits kept the host from running
        ahead of the GPU (on an H200 forward waited 37 ms a step here; docs/benchmarks.md)."""
        while True:
            with self._lock:
                done = [s for s in self._inflight if s.pending is None or s.pending[0].done()]
                host = [s for s in self._inflight if not s.on_device and s not in done]
            for s in done:
                self._wait_put(s)
            if sum(s.nbytes for s in host) <= self.inflight_bytes:
                return
            self._wait_put(host[0])

    def _prefetch_before(self, index):
        """Starts fetching the tensors saved just before ``index`` (backward's next ones)."""
        ahead = 0
        i = index - 1
        while ahead < self.prefetch_bytes:
            ref = self._alive.get(i)
            s = ref() if ref is not None else None
            if s is None:
                return  # backward frees in reverse order: nothing alive below a gap
            if s.used:  # backward is not strictly the reverse of forward
                i -= 1
                continue
            ahead += s.nbytes
            if s.fetched is None and s.pending is None:
                s.fetched = self.client.submit(self._fetch, s)
            i -= 1

    # ---- forgetting ----

    def _forget(self, s):
        with self._lock:
            self._alive.pop(s.index, None)
            if self._owner.get(s.key) != s.index:
                return  # a later iteration stored this key again: that object is not ours
            del self._owner[s.key]
            self._garbage.append(s.key)
            n = len(self._garbage)
        # Under a plan a freed tensor leaves hbm at once: it counts against the job's budget there.
        if n >= (1 if self.plan is not None else 64):
            self._collect()

    def _collect(self, force=False):
        with self._lock:
            keys, self._garbage = self._garbage, []
        if keys:
            try:
                self.client.delete_batch(keys)
            except Exception:  # a closed client, or a forked child: nothing to do from here
                if force:
                    raise
