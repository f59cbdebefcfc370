"""CUDA tensors in the server's device hbm (``tierpoold --hbm-device N``, a package built with
``-DTIERPOOL_CUDA=ON``): device reservations written and device views read by the GPU itself,
with no copy through host memory. The server moves those objects to dram and back on the GPU's
copy engines, each byte checked against its XXH3 checksum.

Stream rules: the bytes of a device view are ready when it is handed out, and the bytes of a
device reservation must be written when it commits; the copies here run on a stream of their own
(``copy_stream``) ordered after the caller's current stream, and what the caller's stream reads
later is ordered after them (``wait_event``, ``record_stream``)."""

import threading
import warnings

import torch

from .. import _errors
from ..client import DeviceView

_streams = {}  # device index -> the stream device copies run on
_streams_lock = threading.Lock()


def copy_stream(device):
    """The stream tierpool's device copies for ``device`` (a torch.device) run on."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    with _streams_lock:
        s = _streams.get(index)
        if s is None:
            s = _streams[index] = torch.cuda.Stream(device=index)
        return s


def _bytes_of(t):
    """A contiguous tensor's bytes as a flat uint8 tensor (a view, no copy)."""
    if t.numel() == 0:
        return t.new_empty(0, dtype=torch.uint8)
    return t.reshape(-1).view(torch.uint8)


def _host_bytes(mv):
    """A uint8 CPU tensor over a (read-only) host view's bytes; torch warns about any read-only
    buffer, and these are only read."""
    if mv.nbytes == 0:
        return torch.empty(0, dtype=torch.uint8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return torch.frombuffer(mv, dtype=torch.uint8)


def host_bytes_into(mv, t):
    """Copies a host view's bytes into a contiguous tensor of as many bytes."""
    src = _host_bytes(mv)
    _bytes_of(t).copy_(src)
    del src  # the memoryview is released by the caller: nothing may still export it


def _dtype(name):
    dtype = getattr(torch, name, None) if name else None
    if not isinstance(dtype, torch.dtype):
        raise _errors.InvalidArgument("the object's dtype %r is not a torch dtype; give dtype="
                                      % name, 1)
    return dtype


def write_device(reservation, src):
    """Starts copying a contiguous CUDA tensor into a device reservation on the copy stream,
    after the work the current stream has queued. Returns the event that marks the copy's end:
    the reservation commits after it (``commit_after``)."""
    stream = copy_stream(src.device)
    stream.wait_stream(torch.cuda.current_stream(src.device))
    with torch.cuda.stream(stream):
        if src.numel() > 0:
            torch.as_tensor(reservation, device=src.device).copy_(_bytes_of(src))
        done = torch.cuda.Event()
        done.record(stream)
    src.record_stream(stream)  # its memory is not reused before the copy has read it
    return done


def commit_after(done, reservation):
    """Waits for a write_device copy, then checksums (on the GPU) and publishes the object."""
    done.synchronize()
    reservation.commit()


def read_device(view, nbytes, device):
    """Starts copying a device view's bytes into a new uint8 tensor on ``device`` (the copy
    stream). Returns (tensor, event at the copy's end); the view may be released once the event
    has passed, and the caller's stream must wait for it (``ready``)."""
    stream = copy_stream(device)
    with torch.cuda.stream(stream):
        out = torch.empty(nbytes, dtype=torch.uint8, device=device)
        if nbytes > 0:
            out.copy_(torch.as_tensor(view, device=device))
        done = torch.cuda.Event()
        done.record(stream)
    return out, done


def ready(t, done):
    """Makes the current stream wait for a read_device copy before it uses ``t``."""
    current = torch.cuda.current_stream(t.device)
    current.wait_event(done)
    t.record_stream(current)
    return t


def put_device(client, key, t, *, kind=None, durability=None, dtype=None, shape=None):
    """``Client.put`` of a CUDA tensor into the server's device hbm: a device reservation the
    GPU writes, checksummed on the GPU at commit. Where hbm has no room the reservation is in
    host memory and the bytes are copied there."""
    src = t.detach()
    if not src.is_contiguous():
        raise _errors.InvalidArgument(
            "data is a non-contiguous tensor (strides %s); pass tensor.contiguous()"
            % (tuple(src.stride()),), 1)
    nbytes = src.numel() * src.element_size()
    r = client.reserve(key, nbytes, kind=kind, durability=durability, tier="hbm",
                       dtype=dtype or str(src.dtype).replace("torch.", ""),
                       shape=list(shape) if shape is not None else list(src.shape), device=True)
    try:
        if r.device >= 0:
            commit_after(write_device(r, src), r)
            return
        if nbytes > 0:
            torch.frombuffer(r.buffer, dtype=torch.uint8).copy_(_bytes_of(src).cpu())
        r.commit()
    except BaseException:
        r.abort()
        raise


def get_into_device(client, key, buffer):
    """``Client.get_into`` of a CUDA tensor from the server's device hbm: the GPU copies from
    the device copy (brought up first when the object is in a lower tier)."""
    if not buffer.is_contiguous():
        raise _errors.InvalidArgument(
            "buffer is a non-contiguous tensor (strides %s); pass tensor.contiguous()"
            % (tuple(buffer.stride()),), 1)
    capacity = buffer.numel() * buffer.element_size()
    v = client.view(key, tier="hbm", device=True)
    n = v.size if isinstance(v, DeviceView) else v.nbytes
    try:
        if capacity < n:
            raise _errors.InvalidArgument("buffer of %d bytes is too small for %r (%d bytes)"
                                          % (capacity, key, n), 1)
        if n == 0:
            return 0
        dst = _bytes_of(buffer)[:n]
        if isinstance(v, DeviceView):
            if client._verify:
                v.verify()
            # Straight into the caller's tensor on its stream (ordered after its earlier work
            # there), then waited for: the pin is released below.
            dst.copy_(torch.as_tensor(v, device=buffer.device))
            torch.cuda.current_stream(buffer.device).synchronize()
        else:
            host_bytes_into(v, dst)
        return n
    finally:
        v.release()


class _PinnedDeviceBytes:
    """Holds a device view for the tensor made from it; when the tensor goes, waits for the
    kernels queued on its GPU (they may still read the bytes) and releases the pin."""

    def __init__(self, view):
        self.view = view
        self.__cuda_array_interface__ = view.__cuda_array_interface__

    def __del__(self):
        try:
            torch.cuda.synchronize(self.view.device)
        finally:
            self.view.release()


def view_tensor(client, key, *, dtype=None, shape=None):
    """A CUDA tensor sharing the object's copy in the server's device hbm (no copy): read only,
    the object pinned there until the tensor is gone. Typed by the object's recorded dtype and
    shape unless ``dtype``/``shape`` are given. Where the object cannot be brought into hbm, a
    copy on the hbm device instead."""
    device = client.hbm_device
    if device is None:
        raise _errors.FailedPrecondition(
            "the server's hbm is not a GPU's memory this client can open (tierpoold --hbm-device,"
            " and a tierpool package built with -DTIERPOOL_CUDA=ON)", 5)
    v = client.view(key, tier="hbm", device=True)
    if isinstance(v, DeviceView):
        meta_dtype, meta_shape = v.dtype, v.shape
        flat = torch.as_tensor(_PinnedDeviceBytes(v), device=torch.device("cuda", device))
    else:
        meta_dtype, meta_shape = v.obj.dtype, list(v.obj.shape)
        with v:
            host = _host_bytes(v)
            flat = host.to(torch.device("cuda", device))
            del host
    dtype = dtype or _dtype(meta_dtype)
    shape = list(shape) if shape is not None else meta_shape
    return flat.view(dtype).view(shape)
