"""tierpool.Client: put tensors into the node's tierpoold and get them back, from Python."""

import asyncio
import concurrent.futures
import dataclasses
import enum
import json
import operator
import os
import sys
import threading

from . import _errors
from . import _tierpool


class Tier(enum.IntEnum):
    """The tiers, fastest first."""
    HBM = 0
    DRAM = 1
    REMOTE = 2
    NVME = 3


class Kind(enum.IntEnum):
    """What an object is; the server's policies and ``stat`` use it."""
    OTHER = 0
    KV_BLOCK = 1
    ACTIVATION = 2
    OPTIMIZER_STATE = 3
    WEIGHT = 4


class Durability(enum.IntEnum):
    """``CACHE`` objects may be dropped when every tier is full (a miss is recomputed);
    ``RETAINED`` ones never are while the server runs (a put that cannot fit fails instead)."""
    CACHE = 0
    RETAINED = 1


_enum_cache = {}  # (enum class, a name or value seen before) -> its int: puts call this thrice


def _enum(cls, value, what):
    if value is None:
        return -1
    try:
        return _enum_cache[cls, value]
    except (KeyError, TypeError):
        pass
    n = _enum_slow(cls, value, what)
    if len(_enum_cache) < 1024:
        _enum_cache[cls, value] = n
    return n


def _enum_slow(cls, value, what):
    if isinstance(value, str):
        try:
            return int(cls[value.upper()])
        except KeyError:
            raise _errors.InvalidArgument(
                "%s %r is not one of %s" % (what, value, ", ".join(m.name.lower() for m in cls)),
                1) from None
    try:
        return int(cls(value))
    except ValueError:
        raise _errors.InvalidArgument("%s %r is not a %s" % (what, value, cls.__name__), 1) from None


def _whole(value, what):
    """``value`` as an int when it is an integer (int, numpy's, a 0-d integer tensor), else
    InvalidArgument: int("7") or int(7.9) would quietly turn a mistake into a size."""
    if isinstance(value, bool) or isinstance(value, (str, bytes, float)):
        raise _errors.InvalidArgument("%s must be an integer, not %s %r"
                                      % (what, type(value).__name__, value), 1)
    try:
        return operator.index(value)
    except TypeError:
        raise _errors.InvalidArgument("%s must be an integer, not %s %r"
                                      % (what, type(value).__name__, value), 1) from None


@dataclasses.dataclass(frozen=True)
class ObjectInfo:
    """One object's metadata (``Client.stat(key)``, ``Client.list()``)."""
    key: str
    size: int
    dtype: str
    shape: tuple
    kind: Kind
    durability: Durability
    tier: Tier
    checksum: int  # XXH3-64 of the bytes
    created_unix_ms: int
    pins: int  # readers holding it right now

    @classmethod
    def _from(cls, d):
        return cls(d["key"], d["size"], d["dtype"], tuple(d["shape"]), Kind(d["kind"]),
                   Durability(d["durability"]), Tier(d["tier"]), d["checksum"],
                   d["created_unix_ms"], d["pins"])


# A fork() makes the child's copy of every client stale: it must not speak on its parent's
# sockets. Counting forks here is cheaper than asking for the pid on every call.
_fork_generation = 0


def _count_fork():
    global _fork_generation
    _fork_generation += 1


os.register_at_fork(after_in_child=_count_fork)


_tensor_types = {}  # type -> whether it is a torch tensor, without importing torch
_dtype_names = {}  # a numpy or torch dtype -> its name (str() of a numpy dtype takes ~3 us)


def _is_tensor(obj):
    t = type(obj)
    known = _tensor_types.get(t)
    if known is None:
        known = _tensor_types[t] = t.__module__.startswith("torch") and hasattr(t, "data_ptr")
    return known


def _dtype_name(dtype):
    name = _dtype_names.get(dtype)
    if name is None:
        name = str(dtype).replace("torch.", "")
        if len(_dtype_names) < 1024:  # structured numpy dtypes are unbounded in number
            _dtype_names[dtype] = name
    return name


def _tensor_meta(t):
    return _dtype_name(t.dtype), list(t.shape)


def _host_tensor(t, what):
    """A tensor to put: a GPU tensor copied to the host; a non-contiguous one refused."""
    if t.device.type != "cpu":
        t = t.detach().cpu()
    return _cpu_tensor(t, what)


def _cpu_tensor(t, what, into=False):
    """A contiguous CPU tensor, or an error that says what to do: for a tensor to read into
    (``into``), .contiguous() would be a new tensor the bytes never come back from."""
    if not t.is_contiguous():
        if into:
            raise _errors.InvalidArgument(
                "%s is a non-contiguous tensor (strides %s): an object's bytes are copied in "
                "their memory order into one block; read into a contiguous tensor and copy it "
                "into this one (tmp = torch.empty(shape, dtype=dtype); get_into(key, tmp); "
                "t.copy_(tmp))" % (what, tuple(t.stride())), 1)
        raise _errors.InvalidArgument(
            "%s is a non-contiguous tensor (strides %s); pass tensor.contiguous()"
            % (what, tuple(t.stride())), 1)
    return t


class Reservation:
    """Room for one object in shared memory: write the bytes into ``buffer`` (a writable
    memoryview), then ``commit()``. As a context manager it commits on a clean exit and aborts
    on an exception. Arrays or slices made from ``buffer`` must be gone by commit: a write after
    it would change a published object.

    A device reservation (``reserve(..., tier="hbm", device=True)`` on a server whose hbm is a
    GPU's memory) has ``device`` >= 0 and no ``buffer``: its room is in that GPU's memory, given
    by ``__cuda_array_interface__`` (``torch.as_tensor(r, device="cuda")``). Every kernel or copy
    writing it must have finished by ``commit()``, which checksums the bytes on the GPU."""

    def __init__(self, impl, key):
        self._impl = impl
        self.key = key
        self.device = impl.device
        self.buffer = memoryview(impl) if self.device < 0 else None

    @property
    def size(self):
        return self._impl.size

    @property
    def tier(self):
        """Where the room is: ``Tier.HBM`` or ``Tier.DRAM`` (hbm had no room)."""
        return Tier(self._impl.tier)

    @property
    def __cuda_array_interface__(self):
        return self._impl.__cuda_array_interface__  # AttributeError for host room

    def _release_buffer(self):
        if self.buffer is None:
            return
        try:
            self.buffer.release()
        except BufferError:
            raise BufferError("an array or memoryview made from reservation %r's buffer is still "
                              "alive; drop it before commit()" % self.key) from None
        # Slices of the memoryview keep the exporter referenced (self._impl, the getrefcount
        # argument, and nothing else when they are gone).
        if sys.getrefcount(self._impl) > 2:
            self.buffer = memoryview(self._impl)
            raise BufferError("a slice of reservation %r's buffer is still alive; drop it "
                              "before commit()" % self.key)

    def commit(self):
        """Checksums the bytes and publishes the object under its key."""
        self._release_buffer()
        self._impl.commit()

    def abort(self):
        try:
            if self.buffer is not None:
                self.buffer.release()
        except BufferError:
            pass
        self._impl.abort()

    def __enter__(self):
        return self.buffer if self.buffer is not None else self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.commit()
        else:
            self.abort()
        return False


class DeviceView:
    """A pinned object's copy in a GPU's memory (``Client.view(key, tier="hbm", device=True)``
    on a server whose hbm is that GPU's): ``__cuda_array_interface__`` gives its bytes, read
    only, to PyTorch (``tierpool.torch.view_tensor``), CuPy or Numba without a copy. The pin
    holds until ``release()``, or until this object and every array made from it are gone.
    Release it by hand only once no kernel still reads the bytes."""

    def __init__(self, impl):
        self._impl = impl

    key = property(lambda self: self._impl.key)
    size = property(lambda self: self._impl.size)
    dtype = property(lambda self: self._impl.dtype)
    shape = property(lambda self: list(self._impl.shape))
    checksum = property(lambda self: self._impl.checksum)
    device = property(lambda self: self._impl.device)

    @property
    def tier(self):
        return Tier(self._impl.tier)

    @property
    def __cuda_array_interface__(self):
        return self._impl.__cuda_array_interface__

    def verify(self):
        """Checks the bytes against the object's XXH3-64 checksum, on the GPU."""
        self._impl.verify()

    def release(self):
        self._impl.release()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()
        return False


class Plan:
    """A registered plan (``Client.register_plan``): the server's executor moves the plan's
    tensors ahead of the steps the job reports. Lives until ``unregister()`` (or the end of a
    ``with`` block, or the process)."""

    def __init__(self, impl):
        self._impl = impl

    @property
    def job_id(self):
        return self._impl.job_id

    def report_progress(self, iteration, step, outside_bytes=0):
        """The job is about to start ``step`` of ``iteration`` (one-way, cheap); it held at
        most ``outside_bytes`` outside tierpool since its last report (shown in stat)."""
        self._impl.report_progress(_whole(iteration, "iteration"), _whole(step, "step"),
                                   _whole(outside_bytes, "outside_bytes"))

    def unregister(self):
        self._impl.unregister()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.unregister()
        return False


def _raise_first(results, strict):
    if strict:
        for r in results:
            if isinstance(r, Exception):
                raise r
    return results


class Client:
    """A connection to the node's tierpoold.

    ``Client(socket=None, namespace="default")`` connects (``socket`` None: ``$TIERPOOL_SOCKET``,
    ``$XDG_RUNTIME_DIR/tierpool.sock``, else ``/tmp/tierpool-<uid>.sock``). One client is safe to
    share between threads; every call releases the GIL while it waits. Data goes in from anything
    with the buffer protocol (bytes, bytearray, memoryview, numpy arrays) or a contiguous CPU torch
    tensor, without an extra copy.

    Copying gets (``get``, ``get_into``, ``get_batch``, ``get_batch_into``) check the bytes
    against the object's XXH3 as they copy them (``verify_checksums``, on by default): a stray
    write after a commit, or bad memory, raises ``DataLoss``, never returns wrong bytes. Views
    are not checked as they are read (``mv.obj.verify()`` is).

    After ``os.fork()`` (a DataLoader worker) the child never uses the parent's connections:
    with ``on_fork="reconnect"`` (default) the child's first call connects afresh, with
    ``on_fork="error"`` it raises ``FailedPrecondition``.
    """

    def __init__(self, socket=None, namespace="default", *, client_name="", max_connections=4,
                 verify_checksums=True, busy_poll_us=-1, async_threads=2, on_fork="reconnect"):
        if on_fork not in ("reconnect", "error"):
            raise _errors.InvalidArgument("on_fork is 'reconnect' or 'error', not %r" % on_fork, 1)
        self._args = (socket or "", namespace, client_name or "python-%d" % os.getpid(),
                      _whole(max_connections, "max_connections"), bool(verify_checksums),
                      _whole(busy_poll_us, "busy_poll_us"), 1)
        self._verify = bool(verify_checksums)
        self._on_fork = on_fork
        self._async_threads = max(1, _whole(async_threads, "async_threads"))
        self._executor = None
        self._executor_lock = threading.Lock()
        self._connect()

    def _connect(self):
        self._impl = _tierpool.Client(*self._args)
        self._impl.set_verify(self._verify)
        self._generation = _fork_generation
        self._pid = os.getpid()

    @property
    def _c(self):
        if self._generation != _fork_generation:
            self._after_fork()
        return self._impl

    def _after_fork(self):
        if self._impl.closed:
            raise _errors.FailedPrecondition("the client is closed", 5)
        if self._on_fork == "error":
            raise _errors.FailedPrecondition(
                "this client was connected by process %d and this process (%d) is a fork() of "
                "it; connect a new tierpool.Client here, or make it with on_fork='reconnect'"
                % (self._pid, os.getpid()), 5)
        # The parent's handles are left alone (dropping them sends nothing from here).
        self._executor = None
        self._executor_lock = threading.Lock()
        self._connect()

    @property
    def namespace(self):
        return self._impl.namespace

    @property
    def hbm_device(self):
        """The CUDA device whose memory holds the server's hbm tier (``tierpoold --hbm-device``),
        when this package can use it (built with ``-DTIERPOOL_CUDA=ON``); else None."""
        d = self._c.hbm_device
        return None if d < 0 else d

    def _device_for(self, t, tier):
        """Whether a CUDA tensor's bytes go to or come from the server's device hbm directly:
        it asks for hbm (``tier``, as _enum gives it), and that is this tensor's GPU."""
        if t.device.type != "cuda" or tier != Tier.HBM:
            return False
        d = self.hbm_device
        return d is not None and d == t.device.index

    @property
    def closed(self):
        return self._impl.closed

    def close(self):
        """Closes the connections. Views and reservations already made stay usable."""
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
        self._impl.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    # ---- puts ----

    def put(self, key, data, *, kind=None, durability=None, tier=None, dtype=None, shape=None):
        """Stores ``data`` under ``key`` (replacing an object of that key).

        ``kind``: a ``Kind`` or its name ("activation", "kv_block", ...); ``durability``:
        "retained" (default) or "cache"; ``tier``: "hbm" to place it there (default dram).
        ``dtype`` and ``shape`` are recorded with the object (taken from a tensor or array)."""
        c = self._c
        k = 0 if kind is None else _enum(Kind, kind, "kind")
        d = 1 if durability is None else _enum(Durability, durability, "durability")
        t = _enum(Tier, tier, "tier")
        if _is_tensor(data):
            if self._device_for(data, t):
                from .torch import _device  # torch is loaded: data is a tensor
                return _device.put_device(self, key, data, kind=kind, durability=durability,
                                          dtype=dtype, shape=shape)
            data = _host_tensor(data, "data")
            tdtype, tshape = _tensor_meta(data)
            c.put_address(key, data.data_ptr(), data.element_size() * data.numel(), k, d, t,
                          dtype or tdtype, list(shape) if shape is not None else tshape)
            return
        if dtype is None and hasattr(data, "dtype") and hasattr(data, "shape"):  # numpy
            dtype, shape = _dtype_name(data.dtype), list(data.shape) if shape is None else shape
        c.put(key, data, k, d, t, dtype or "", list(shape or ()))

    def reserve(self, key, size, *, kind=None, durability=None, tier=None, dtype=None,
                shape=None, device=False):
        """Reserves ``size`` bytes of shared memory for ``key``: write into the returned
        ``Reservation``'s ``buffer`` and ``commit()`` (or use it as a context manager).
        ``device=True`` with ``tier="hbm"``: the room is in the GPU memory of the server's hbm
        where it has room there (``Reservation.device`` >= 0), else in host memory as without."""
        c = self._c
        impl = c.reserve(key, _whole(size, "size"),
                         0 if kind is None else _enum(Kind, kind, "kind"),
                         1 if durability is None else _enum(Durability, durability, "durability"),
                         _enum(Tier, tier, "tier"), dtype or "", list(shape or ()), bool(device))
        return Reservation(impl, key)

    def put_batch(self, items, *, kind=None, durability=None, tier=None, strict=True):
        """Stores several objects in one round trip. ``items``: a mapping or (key, data) pairs.
        Returns one entry per item, None or the exception; with ``strict`` (default) the first
        exception is raised after every item was tried."""
        c = self._c
        pairs = list(items.items()) if hasattr(items, "items") else list(items)
        norm = [(key, _tensor_bytes(_host_tensor(data, "the data of %r" % key))
                 if _is_tensor(data) else data) for key, data in pairs]
        out = c.put_batch(norm, 0 if kind is None else _enum(Kind, kind, "kind"),
                          1 if durability is None else _enum(Durability, durability, "durability"),
                          _enum(Tier, tier, "tier"))
        return _raise_first([None if code == 0 else _errors.from_status(code, msg)
                             for code, msg in out], strict)

    # ---- gets ----

    def get(self, key):
        """The object's bytes (a copy)."""
        return self._c.get(key)

    def get_into(self, key, buffer, *, tier=None):
        """Copies the object into ``buffer`` (writable, contiguous: bytearray, numpy array,
        CPU tensor) and returns its size. ``InvalidArgument`` when the buffer is too small.
        ``tier="hbm"``: copy from the hbm copy (the read of a planned step: waits for a
        prefetch on its way, or brings the object up; counted in the plan's hits)."""
        c = self._c
        t = _enum(Tier, tier, "tier")
        if _is_tensor(buffer):
            if self._device_for(buffer, t):
                from .torch import _device
                return _device.get_into_device(self, key, buffer)
            if buffer.device.type != "cpu":
                host = buffer.new_empty(buffer.shape, device="cpu", pin_memory=True)
                n = self.get_into(key, host, tier=tier)
                buffer.copy_(host)
                return n
            _cpu_tensor(buffer, "buffer", into=True)
            return c.get_into_address(key, buffer.data_ptr(),
                                      buffer.element_size() * buffer.numel(), t)
        return c.get_into(key, buffer, t)

    def view(self, key, *, tier=None, device=False):
        """Zero copy: a read-only ``memoryview`` of the object's bytes in shared memory. The
        object is pinned (never moved or freed) for as long as the memoryview, or anything made
        from it (``numpy.frombuffer``, ``torch.frombuffer``), is alive; ``with client.view(k) as
        mv:`` releases it at the end of the block. ``mv.obj`` has the object's ``key``, ``size``,
        ``tier``, ``dtype``, ``shape``, ``checksum`` and ``verify()``. ``tier="hbm"`` asks for
        the hbm copy (waiting for a prefetch or bringing it up).

        ``device=True`` with ``tier="hbm"`` on a server whose hbm is a GPU's memory: a
        ``DeviceView`` of the copy there (``tierpool.torch.view_tensor`` makes a CUDA tensor of
        it), or a memoryview of a host copy when the object could not be brought into hbm."""
        impl = self._c.view(key, _enum(Tier, tier, "tier"), bool(device))
        if device and impl.device >= 0:
            return DeviceView(impl)
        return memoryview(impl)

    def views(self, keys, *, tier=None, device=False, strict=True):
        """``view`` of several objects in one round trip: a list of memoryviews (or
        ``DeviceView``s), or the exceptions in place when ``strict`` is False."""
        out = self._c.view_batch(list(keys), _enum(Tier, tier, "tier"), bool(device))
        res = []
        for code, msg, impl in out:
            if code != 0:
                res.append(_errors.from_status(code, msg))
            elif device and impl.device >= 0:
                res.append(DeviceView(impl))
            else:
                res.append(memoryview(impl))
        return _raise_first(res, strict)

    def get_batch(self, keys, *, strict=True):
        """The bytes of several objects in one round trip: a list of bytes, or exceptions in
        place when ``strict`` is False."""
        out = self._c.get_batch(list(keys))
        return _raise_first([data if code == 0 else _errors.from_status(code, msg)
                             for code, msg, data in out], strict)

    def get_batch_into(self, items, *, strict=True):
        """Copies several objects into buffers in one round trip. ``items``: (key, buffer)
        pairs; returns each object's size (or its exception, when ``strict`` is False)."""
        c = self._c
        norm = []
        for key, buf in items:
            if _is_tensor(buf):
                if buf.device.type != "cpu":
                    raise _errors.InvalidArgument("get_batch_into takes CPU tensors", 1)
                buf = _tensor_bytes(_cpu_tensor(buf, "the buffer for %r" % key, into=True))
            norm.append((key, buf))
        out = c.get_batch_into(norm)
        return _raise_first([size if code == 0 else _errors.from_status(code, msg)
                             for code, msg, size in out], strict)

    # ---- the rest ----

    def delete(self, key):
        self._c.delete(key)

    def delete_batch(self, keys, *, strict=False):
        """Deletes several objects in one round trip; missing ones are not an error unless
        ``strict``. Returns None or the exception per key."""
        out = self._c.delete_batch(list(keys))
        return _raise_first([None if code == 0 else _errors.from_status(code, msg)
                             for code, msg in out], strict)

    def promote(self, key, tier="hbm"):
        """Moves an object to a tier: "hbm" ahead of use, "dram" out of the way."""
        self._c.promote(key, _enum(Tier, tier, "tier"))

    def stat(self, key=None, *, reset_peaks=False):
        """One object's ``ObjectInfo``; without a key, the server's statistics as a dict (the
        layout of ``tierpool stat --json``: tiers, counters, jobs)."""
        if key is not None:
            return ObjectInfo._from(self._c.stat_object(key))
        return json.loads(self._c.server_stat_json(bool(reset_peaks)))

    def list(self, prefix="", limit=1000):
        """``ObjectInfo`` of the objects whose key starts with ``prefix``, in key order."""
        return [ObjectInfo._from(d) for d in self._c.list(prefix, _whole(limit, "limit"))]

    def register_plan(self, schedule, plan, *, keys=None, name="", hbm_budget_bytes=0,
                      owned_prefix=""):
        """Hands the server a plan for this namespace (docs/schedules.md). ``schedule`` and
        ``plan``: serialized protobufs (bytes) or paths to .pb files; ``keys``: the object key
        of each tensor (default their names). ``owned_prefix``: the job's objects (the
        namespace's keys that start with it) are deleted when the plan goes, unregistered or
        with the process. Returns a ``Plan``."""
        def load(x):
            if isinstance(x, (bytes, bytearray, memoryview)):
                return bytes(x)
            with open(x, "rb") as f:
                return f.read()
        return Plan(self._c.register_plan(name, load(schedule), load(plan), list(keys or ()),
                                          _whole(hbm_budget_bytes, "hbm_budget_bytes"),
                                          owned_prefix))

    # ---- futures and asyncio ----

    def _pool(self):
        with self._executor_lock:
            if self._executor is None:
                self._executor = concurrent.futures.ThreadPoolExecutor(
                    self._async_threads, thread_name_prefix="tierpool")
            return self._executor

    def submit(self, method, *args, **kwargs):
        """Runs ``method(*args, **kwargs)`` (a callable, or the name of one of this client's
        methods) on the client's threads and returns a ``concurrent.futures.Future``. Buffers
        must stay alive until it is done."""
        fn = method if callable(method) else getattr(self, method)
        return self._pool().submit(fn, *args, **kwargs)

    def put_async(self, key, data, **kwargs):
        return self.submit("put", key, data, **kwargs)

    def get_async(self, key):
        return self.submit("get", key)

    def get_into_async(self, key, buffer):
        return self.submit("get_into", key, buffer)

    async def aput(self, key, data, **kwargs):
        """``put`` for asyncio: awaits the call on the client's threads."""
        return await asyncio.wrap_future(self.put_async(key, data, **kwargs))

    async def aget(self, key):
        return await asyncio.wrap_future(self.get_async(key))

    async def aget_into(self, key, buffer):
        return await asyncio.wrap_future(self.get_into_async(key, buffer))


def _tensor_bytes(t):
    """A writable byte view of a contiguous CPU tensor's memory (any dtype)."""
    import torch  # only reached with a tensor in hand
    flat = t.reshape(-1)
    if flat.dtype != torch.uint8:
        flat = flat.view(torch.uint8) if flat.numel() else flat.to(torch.uint8)
    return flat.numpy()
