#!/usr/bin/env python3
"""The Python client against the C++ client, at `tierpool bench`'s sizes, in one run.

Runs `tierpool bench --json` (the C++ client: its reference) and the same operations through
`tierpool.Client` against the same tierpoold, alternating C++ and Python `--rounds` times, and
prints each case's throughput and the Python / C++ ratio (mean over rounds). The single-object
puts and gets are also timed through the C ABI (libtierpool's tp_put/tp_get, tp_reserve/commit,
tp_get_view/release, called with ctypes) in this process, on the same buffers, right after each
Python case: a reference without the process-to-process differences of the first one (another
heap, other seconds of a shared machine), whose ratio is the binding's own cost.

    /usr/bin/python3 benchmarks/python_client_bench.py --tool build/ci/client/tierpool \
        [--socket PATH] [--seconds 0.4] [--rounds 3] [--json out.json]
"""

import argparse
import ctypes
import json
import os
import subprocess
import sys
import time

import numpy as np

import tierpool

SIZES = [4096, 256 << 10, 4 << 20, 64 << 20]


def measure(budget, min_iters, op):
    op()  # warm-up
    times = []
    start = time.perf_counter()
    while True:
        t0 = time.perf_counter()
        op()
        t1 = time.perf_counter()
        times.append(t1 - t0)
        if len(times) >= min_iters and t1 - start >= budget:
            return times


def row(size, op, path, times, per_op=1):
    times_sorted = sorted(times)
    total = sum(times)
    return {"size": size, "op": op, "path": path, "objects_per_op": per_op,
            "gbps": len(times) * size * per_op / total / 1e9,
            "p50_us": times_sorted[len(times) // 2] * 1e6}


class CApi:
    """libtierpool's C ABI through ctypes (the reference in this process): tp_put / tp_get,
    tp_reserve + tp_commit, tp_get_view + tp_view_release."""

    class PutOptions(ctypes.Structure):
        _fields_ = [("dtype", ctypes.c_char_p), ("shape", ctypes.c_void_p),
                    ("shape_len", ctypes.c_size_t), ("kind", ctypes.c_int),
                    ("durability", ctypes.c_int), ("tier", ctypes.c_int),
                    ("numa_node", ctypes.c_int)]

    def __init__(self, library, socket):
        self.lib = ctypes.CDLL(library)
        if socket:
            os.environ["TIERPOOL_SOCKET"] = socket
        self.handle, err = ctypes.c_void_p(), ctypes.c_char_p()
        if self.lib.tp_connect(None, ctypes.byref(self.handle), ctypes.byref(err)) != 0:
            raise RuntimeError("tp_connect: %s" % err.value)
        self.opts = self.PutOptions()
        self.lib.tp_put_options_init(ctypes.byref(self.opts))
        self.opts.durability = 0  # cache, as the other rows

    def ops(self, size, src, dst):
        """The reference's (op, path) -> callable for one size, on the Python rows' buffers."""
        key = b"pybench-capi"
        put = (self.handle, key, ctypes.c_void_p(src.ctypes.data), ctypes.c_size_t(size),
               ctypes.byref(self.opts), None)
        get = (self.handle, key, ctypes.c_void_p(dst.ctypes.data), ctypes.c_size_t(size), None,
               None)
        res, view = ctypes.c_void_p(), ctypes.c_void_p()

        def zput():
            self.lib.tp_reserve(self.handle, key, ctypes.c_size_t(size), ctypes.byref(self.opts),
                                ctypes.byref(res), None)
            self.lib.tp_commit(res, None)

        def zget():
            self.lib.tp_get_view(self.handle, key, -1, ctypes.byref(view), None)
            self.lib.tp_view_release(view)
        return {("put", "copy"): lambda: self.lib.tp_put(*put),
                ("get", "copy"): lambda: self.lib.tp_get(*get),
                ("put", "zero_copy"): zput, ("get", "zero_copy"): zget}


def python_rows(client, budget, capi=None, ref_first=False):
    """The Python rows and, with ``capi``, each single-object case through the C ABI measured
    right beside it (the same seconds of a noisy machine, the same buffers; ``ref_first``
    measures the reference first, so that rounds alternate the order)."""
    rows, ref = [], []
    for size in SIZES:
        src = (np.arange(size, dtype=np.uint64) * 131 + 7).astype(np.uint8)
        dst = np.zeros(size, dtype=np.uint8)
        n = 10 if size >= 64 << 20 else 50
        key = "pybench-%d" % size
        ref_ops = capi.ops(size, src, dst) if capi else {}

        def add(op, path, fn):
            reference = ref_ops.get((op, path))
            if reference and ref_first:
                ref.append(row(size, op, path, measure(budget, n, reference)))
            rows.append(row(size, op, path, measure(budget, n, fn)))
            if reference and not ref_first:
                ref.append(row(size, op, path, measure(budget, n, reference)))
        add("put", "copy", lambda: client.put(key, src, durability="cache"))
        add("get", "copy", lambda: client.get_into(key, dst))
        assert np.array_equal(src, dst), "bytes read back differ"

        def zput():
            r = client.reserve(key, size, durability="cache")
            r.commit()
        add("put", "zero_copy", zput)

        def zget():
            client.view(key).release()
        add("get", "zero_copy", zget)
        rows.append(row(size, "get", "bytes", measure(budget, n, lambda: client.get(key))))
        client.delete(key)
    batch = 64
    src = np.frombuffer(os.urandom(batch * 4096), dtype=np.uint8)
    dst = np.zeros(batch * 4096, dtype=np.uint8)
    keys = ["pybench-batch-%d" % i for i in range(batch)]
    puts = [(k, src[i * 4096:(i + 1) * 4096]) for i, k in enumerate(keys)]
    gets = [(k, dst[i * 4096:(i + 1) * 4096]) for i, k in enumerate(keys)]
    rows.append(row(4096, "put_batch", "copy", measure(
        budget, 50, lambda: client.put_batch(puts, kind="kv_block", durability="cache")), batch))
    rows.append(row(4096, "get_batch", "copy", measure(
        budget, 50, lambda: client.get_batch_into(gets)), batch))
    client.delete_batch(keys)
    return rows, ref


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tool", required=True, help="the tierpool command-line tool")
    ap.add_argument("--socket", default=None)
    ap.add_argument("--seconds", type=float, default=0.4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", default=None)
    ap.add_argument("--library", default=None,
                    help="libtierpool.so for the in-process C ABI reference (default: beside "
                         "the tool's build, client/libtierpool.so.0)")
    a = ap.parse_args()
    client = tierpool.Client(a.socket, "pybench")
    library = a.library or os.path.join(os.path.dirname(os.path.abspath(a.tool)),
                                        "libtierpool.so.0")
    capi = CApi(library, a.socket) if os.path.exists(library) else None
    cpp, py, cref = {}, {}, {}
    for round_ in range(a.rounds):
        cmd = [a.tool, "bench", "--json", "--seconds", str(a.seconds)]
        if a.socket:
            cmd += ["--socket", a.socket]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        for r in json.loads(out):
            cpp.setdefault((r["size"], r["op"], r["path"]), []).append(r["gbps"])
        rows, ref = python_rows(client, a.seconds, capi, ref_first=round_ % 2 == 1)
        for r in rows:
            py.setdefault((r["size"], r["op"], r["path"]), []).append(r["gbps"])
        for r in ref:
            cref.setdefault((r["size"], r["op"], r["path"]), []).append(r["gbps"])
    mean = lambda v: sum(v) / len(v)  # noqa: E731
    table = []
    print("| size | op | path | C++ GB/s | Python GB/s | Python / C++ | Python / C ABI here |")
    print("|---:|---|---|---:|---:|---:|---:|")
    for key in sorted(py, key=lambda k: (k[0], k[1], k[2])):
        size, op, path = key
        ref = cpp.get((size, op, "copy" if path == "bytes" else path))
        c, p = (mean(ref) if ref else None), mean(py[key])
        ratio = p / c if c else None
        here = cref.get(key)
        here_ratio = p / mean(here) if here else None
        table.append({"size": size, "op": op, "path": path, "cpp_gbps": c, "python_gbps": p,
                      "ratio": ratio, "capi_gbps": mean(here) if here else None,
                      "ratio_to_capi": here_ratio})
        label = "%d KiB" % (size >> 10) if size < 1 << 20 else "%d MiB" % (size >> 20)
        print("| %s | %s | %s%s | %s | %.3f | %s | %s |" % (
            label, op, path, " (vs C++ copy)" if path == "bytes" else "",
            "%.3f" % c if c else "-", p, "%.2f" % ratio if ratio else "-",
            "%.2f" % here_ratio if here_ratio else "-"))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(table, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
