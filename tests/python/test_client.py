"""tierpool.Client against a real tierpoold: every call, its errors, views, reservations,
batches, futures, asyncio and fork()."""

import array
import asyncio
import os
import signal
import subprocess
import sys
import threading

import numpy as np
import pytest
import torch

import tierpool
from conftest import wait_for


def counters(c):
    return c.stat()["counters"]


def test_put_get_round_trips_every_buffer_kind(client):
    data = os.urandom(300_000)
    samples = {
        "bytes": data,
        "bytearray": bytearray(data),
        "memoryview": memoryview(data)[1000:2000],
        "array": array.array("d", range(1000)),
        "numpy": np.arange(50_000, dtype=np.float32).reshape(500, 100),
        "tensor": torch.randn(300, 77),
        "bf16": torch.randn(64, 64).to(torch.bfloat16),
        "empty": b"",
    }
    for key, value in samples.items():
        client.put(key, value)
        expect = (value.view(torch.int16).numpy().tobytes() if key == "bf16"
                  else value.numpy().tobytes() if torch.is_tensor(value)
                  else bytes(value) if not isinstance(value, np.ndarray) else value.tobytes())
        assert client.get(key) == expect, key
    info = client.stat("numpy")
    assert (info.dtype, info.shape, info.size) == ("float32", (500, 100), 200_000)
    assert client.stat("tensor").dtype == "float32"
    assert client.stat("bf16").dtype == "bfloat16"


def test_get_with_checksums_verified_copies_and_checks_in_one_pass(server, request):
    # verify_checksums: a get's bytes are copied into the bytes object and hashed in the same
    # pass (CopyAndChecksum); every size and start offset must come back exact.
    ns = request.node.name[:60]
    with tierpool.Client(server, ns, verify_checksums=True) as c:
        data = os.urandom(1_100_000)
        for size in (1, 2047, 2048, 4096 + 7, 65_536 + 129, 262_144, 1_048_576 + 3):
            for offset in (0, 8, 17):
                key = f"v{size}-{offset}"
                c.put(key, memoryview(data)[offset:offset + size])
                assert c.get(key) == data[offset:offset + size], key


def test_get_into_numpy_tensor_and_bytearray(client):
    t = torch.randn(128, 128)
    client.put("t", t, kind="activation", durability="retained")
    out = torch.empty_like(t)
    assert client.get_into("t", out) == t.numel() * 4
    assert torch.equal(out, t)
    arr = np.empty(128 * 128, dtype=np.float32)
    client.get_into("t", arr)
    assert np.array_equal(arr, t.numpy().reshape(-1))
    small = bytearray(10)
    with pytest.raises(tierpool.InvalidArgument, match="too small"):
        client.get_into("t", small)


def test_view_is_read_only_and_pinned_while_anything_holds_it(client):
    client.put("v", np.arange(1024, dtype=np.int64))
    mv = client.view("v")
    assert mv.readonly and mv.nbytes == 8192
    assert mv.obj.key == "v" and mv.obj.size == 8192 and mv.obj.tier == tierpool.Tier.DRAM
    mv.obj.verify()
    arr = np.frombuffer(mv, dtype=np.int64)
    with pytest.raises(ValueError):
        arr[0] = 5  # read-only
    assert arr[1023] == 1023
    del mv
    assert client.stat("v").pins == 1, "the array still holds the view"
    del arr
    assert wait_for(lambda: client.stat("v").pins == 0)
    with client.view("v") as mv:
        assert bytes(mv[:8]) == (0).to_bytes(8, "little")
        assert client.stat("v").pins == 1
    assert wait_for(lambda: client.stat("v").pins == 0)


def test_views_of_several_objects_in_one_round_trip(client):
    client.put("vs/a", np.arange(512, dtype=np.int64))
    client.put("vs/b", b"xyz" * 2000, tier="hbm")
    a, b, missing = client.views(["vs/a", "vs/b", "vs/none"], tier="hbm", strict=False)
    assert isinstance(missing, tierpool.NotFound)
    assert np.frombuffer(a, dtype=np.int64)[511] == 511
    assert bytes(b[:3]) == b"xyz" and b.obj.tier == tierpool.Tier.HBM
    assert a.obj.tier == tierpool.Tier.HBM  # brought up for the read, as view(tier="hbm") does
    assert client.stat("vs/a").pins == 1 and client.stat("vs/b").pins == 1
    del a, b
    assert wait_for(lambda: client.stat("vs/a").pins == 0 and client.stat("vs/b").pins == 0)
    with pytest.raises(tierpool.NotFound):
        client.views(["vs/none"])


def test_host_memory_in_use_follows_allocations():
    from tierpool import _tierpool
    before = _tierpool.host_bytes_in_use()
    sampler = _tierpool.HostMemorySampler(200.0)
    sampler.offset = before
    block = bytearray(64 << 20)
    assert sampler.sample() >= 64 << 20  # malloc's, whether or not its pages are touched
    del block
    assert sampler.take_peak() >= 64 << 20
    assert sampler.take_peak() < 16 << 20  # the next peak starts from now, the block gone


def test_a_write_after_commit_is_data_loss_for_every_copying_get(server, client):
    """A stray write through a reservation's memory after its commit (here by address, as a
    buggy extension would) changes the object in place: every copying get raises DataLoss."""
    import ctypes
    n = 1 << 20
    r = client.reserve("stray", n)
    with r as buf:
        buf[:] = b"\x07" * n
        address = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    ctypes.memset(address + n // 2, 0x5A, 1)  # after the commit
    with tierpool.Client(server, client.namespace) as other:
        with pytest.raises(tierpool.DataLoss):
            other.get("stray")
        with pytest.raises(tierpool.DataLoss):
            other.get_into("stray", bytearray(n))
        with pytest.raises(tierpool.DataLoss):
            other.get_into("stray", torch.empty(n, dtype=torch.uint8))
        with pytest.raises(tierpool.DataLoss):
            other.get_batch(["stray"])
        with pytest.raises(tierpool.DataLoss):
            other.get_batch_into([("stray", bytearray(n))])
        with other.view("stray") as mv:  # a view hands the bytes out; its check says so
            with pytest.raises(tierpool.DataLoss):
                mv.obj.verify()
    with tierpool.Client(server, client.namespace, verify_checksums=False) as plain:
        assert plain.get("stray")[n // 2] == 0x5A  # plain copies, asked for


def test_reservation_commit_abort_and_outstanding_slices(client):
    with client.reserve("r", 16, kind="kv_block") as buf:
        buf[:] = b"0123456789abcdef"
    assert client.get("r") == b"0123456789abcdef"
    assert client.stat("r").kind == tierpool.Kind.KV_BLOCK
    r = client.reserve("r2", 8)
    arr = np.frombuffer(r.buffer, dtype=np.uint8)
    arr[:] = 7
    with pytest.raises(BufferError, match="still alive"):
        r.commit()
    del arr
    r.buffer[:] = b"x" * 8
    r.commit()
    assert client.get("r2") == b"x" * 8
    with pytest.raises(RuntimeError):
        with client.reserve("r3", 8) as buf:
            raise RuntimeError("the writer failed")
    with pytest.raises(tierpool.NotFound):
        client.get("r3")
    assert wait_for(lambda: counters(client)["reservations_open"] == 0)


def test_batches_list_stat_delete_promote(client):
    client.put_batch({"b/%d" % i: bytes([i]) * (i + 1) for i in range(5)})
    client.put_batch([("b/t", torch.arange(10, dtype=torch.int32))])
    assert client.get_batch(["b/0", "b/4"]) == [b"\x00", b"\x04" * 5]
    got = client.get_batch(["b/1", "b/none"], strict=False)
    assert got[0] == b"\x01\x01" and isinstance(got[1], tierpool.NotFound)
    with pytest.raises(tierpool.NotFound):
        client.get_batch(["b/none"])
    out = [bytearray(2), torch.empty(10, dtype=torch.int32)]
    assert client.get_batch_into([("b/1", out[0]), ("b/t", out[1])]) == [2, 40]
    assert torch.equal(out[1], torch.arange(10, dtype=torch.int32))
    assert [i.key for i in client.list("b/")] == ["b/0", "b/1", "b/2", "b/3", "b/4", "b/t"]
    client.promote("b/4", "hbm")
    assert client.stat("b/4").tier == tierpool.Tier.HBM
    client.promote("b/4", tierpool.Tier.DRAM)
    assert client.stat("b/4").tier == tierpool.Tier.DRAM
    errs = client.delete_batch(["b/0", "b/none"])
    assert errs[0] is None and isinstance(errs[1], tierpool.NotFound)
    client.delete("b/1")
    assert len(client.list("b/")) == 4
    stats = client.stat()
    assert {t["tier"] for t in stats["tiers"]} >= {"hbm", "dram"}
    assert "leases_open" in stats["counters"]


def test_futures_asyncio_and_threads(client):
    futs = [client.put_async("f/%d" % i, bytes([i]) * 1000) for i in range(20)]
    for f in futs:
        f.result()
    assert client.get_async("f/3").result() == bytes([3]) * 1000

    async def main():
        await client.aput("f/a", b"async")
        buf = bytearray(5)
        await client.aget_into("f/a", buf)
        return await client.aget("f/a"), bytes(buf)

    assert asyncio.run(main()) == (b"async", b"async")
    errors = []

    def worker(n):
        try:
            for i in range(50):
                client.put("th/%d/%d" % (n, i), bytes([n]) * 4096)
                assert client.get("th/%d/%d" % (n, i)) == bytes([n]) * 4096
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_calls_release_the_gil(client):
    # A pure-Python thread keeps counting while the main thread sits in tierpool calls.
    client.put("gil", os.urandom(32 << 20))
    stop = threading.Event()
    ticks = [0]

    def spin():
        while not stop.is_set():
            ticks[0] += 1

    t = threading.Thread(target=spin)
    t.start()
    try:
        before = ticks[0]
        out = bytearray(32 << 20)
        for _ in range(20):
            client.get_into("gil", out)
        during = ticks[0] - before
    finally:
        stop.set()
        t.join()
    assert during > 1000


def test_bad_arguments_raise_clear_errors(server):
    c = tierpool.Client(server, "bad")
    with pytest.raises(TypeError, match="bytes-like"):
        c.put("k", [1, 2, 3])
    with pytest.raises(tierpool.InvalidArgument, match="non-contiguous"):
        c.put("k", torch.randn(4, 5).t())
    with pytest.raises(tierpool.InvalidArgument, match="non-contiguous") as e:
        c.get_into("k", torch.empty(4, 5).t())
    assert "read into a contiguous tensor and copy it" in str(e.value)
    assert "pass tensor.contiguous()" not in str(e.value)  # that tensor never gets the bytes
    with pytest.raises(BufferError, match="not writable"):
        c.get_into("k", b"read-only bytes")
    with pytest.raises(ValueError, match="not C-contiguous.*numpy.ascontiguousarray"):
        c.put("k", np.arange(20).reshape(4, 5).T)  # not C-contiguous
    c.put("k", b"x" * 160)
    with pytest.raises(ValueError, match="not C-contiguous.*read into a C-contiguous array"):
        c.get_into("k", np.zeros((5, 4), dtype=np.int64).T)
    with pytest.raises(tierpool.InvalidArgument, match="kind 'weights?'"):
        c.put("k", b"x", kind="weights")
    with pytest.raises(tierpool.InvalidArgument):
        c.put("", b"x")
    with pytest.raises(tierpool.NotFound) as e:
        c.get("missing")
    assert e.value.code == 2 and e.value.code_name == "NOT_FOUND" and "missing" in str(e.value)
    assert isinstance(e.value, LookupError)
    c.close()
    with pytest.raises(tierpool.FailedPrecondition, match="closed"):
        c.get("k")
    with pytest.raises(tierpool.Unavailable, match="tierpoold"):
        tierpool.Client("/tmp/no-such-tierpool-py.sock")
    with pytest.raises(tierpool.InvalidArgument):
        tierpool.Client(server, on_fork="ignore")


def test_sizes_and_counts_must_be_integers(server):
    # reserve("k", "7") made a 7-byte reservation (int("7")), reserve("k", 7.9) one of 7 bytes.
    np = pytest.importorskip("numpy")
    c = tierpool.Client(server)
    for bad in ("7", b"7", 7.9, 7.0, True, None, [7]):
        with pytest.raises(tierpool.InvalidArgument, match="size must be an integer"):
            c.reserve("k", bad)
    with pytest.raises(tierpool.NotFound):
        c.get("k")  # nothing was reserved or made
    with pytest.raises(tierpool.InvalidArgument, match="limit must be an integer"):
        c.list("", "10")
    with pytest.raises(tierpool.InvalidArgument, match="max_connections must be an integer"):
        tierpool.Client(server, max_connections="4")
    with pytest.raises(tierpool.InvalidArgument, match="async_threads"):
        tierpool.Client(server, async_threads=2.5)
    with c.reserve("k", np.int64(7)) as buf:  # numpy's integers are integers
        buf[:] = b"1234567"
    assert c.get("k") == b"1234567"
    c.close()


def _fork_and_get(c, key):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            msg = b"ok:" + c.get(key)
        except tierpool.TierpoolError as e:
            msg = ("%s:%s" % (type(e).__name__, e)).encode()
        os.write(w, msg)
        os._exit(0)
    os.close(w)
    out = b""
    while chunk := os.read(r, 4096):
        out += chunk
    os.close(r)
    os.waitpid(pid, 0)
    return out.decode()


def test_a_forked_child_reconnects_or_refuses_never_shares(server):
    c = tierpool.Client(server, "fork")
    c.put("k", b"parent's")
    with c.view("k") as mv:
        assert _fork_and_get(c, "k") == "ok:parent's"
        # The child's own pin goes with a one-way release (or its connection's close), which
        # the server may take after this stat: wait for it. Had the child released the
        # parent's pin, the count would fall to 0 and never be 1.
        assert wait_for(lambda: c.stat("k").pins == 1), "the child released the parent's pin"
        strict = tierpool.Client(server, "fork", on_fork="error")
        out = _fork_and_get(strict, "k")
        assert out.startswith("FailedPrecondition:") and "fork()" in out
        assert bytes(mv) == b"parent's"
    assert c.get("k") == b"parent's"  # the parent's connections are intact


def test_a_killed_client_leaves_nothing_reserved_or_pinned(server):
    code = r"""
import os, signal, sys, tierpool
c = tierpool.Client(sys.argv[1], "killed")
c.put("held", b"x" * 4096)
views = [c.view("held") for _ in range(3)]
r = c.reserve("half-written", 1 << 20)
r.buffer[:10] = b"0123456789"
print("ready", flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""
    p = subprocess.run([sys.executable, "-c", code, server], capture_output=True, text=True,
                       env=os.environ, timeout=60)
    assert p.returncode == -signal.SIGKILL and "ready" in p.stdout, p.stderr
    with tierpool.Client(server, "killed") as c:
        assert wait_for(lambda: counters(c)["reservations_open"] == 0
                        and counters(c)["leases_open"] == 0)
        assert c.stat("held").pins == 0
        with pytest.raises(tierpool.NotFound):
            c.get("half-written")


def test_device_views_and_reservations_fall_back_or_refuse_without_a_gpu_hbm(client):
    assert client.hbm_device is None  # hbm is the host stand-in here
    client.put("d/1", b"abc", tier="hbm")
    try:
        v = client.view("d/1", tier="hbm", device=True)
    except tierpool.Unimplemented as e:
        assert "TIERPOOL_CUDA" in str(e)  # a package built without CUDA says what it needs
    else:
        assert isinstance(v, memoryview) and bytes(v) == b"abc"  # the host copy
        v.release()
    try:
        r = client.reserve("d/2", 3, tier="hbm", device=True)
    except tierpool.Unimplemented as e:
        assert "TIERPOOL_CUDA" in str(e)
    else:
        assert r.device == -1 and r.buffer is not None
        r.buffer[:] = b"xyz"
        r.commit()
        assert client.get("d/2") == b"xyz"
    # A host view has no device bytes and is not released by hand.
    with client.view("d/1") as mv:
        assert not hasattr(mv.obj, "__cuda_array_interface__")
        with pytest.raises(tierpool.FailedPrecondition):
            mv.obj.release()
