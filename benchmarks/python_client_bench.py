#!/usr/bin/env python3
"""The Python client against the C++ client, at `tierpool bench`'s sizes, in one run.

Runs `tierpool bench --json` (the C++ client: its reference) and the same operations through
`tierpool.Client` against the same tierpoold, alternating C++ and Python `--rounds` times, and
prints each case's throughput and the Python / C++ ratio (mean over rounds).

    /usr/bin/python3 benchmarks/python_client_bench.py --tool build/ci/client/tierpool \
        [--socket PATH] [--seconds 0.4] [--rounds 3] [--json out.json]
"""

import argparse
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


def python_rows(client, budget):
    rows = []
    for size in SIZES:
        src = (np.arange(size, dtype=np.uint64) * 131 + 7).astype(np.uint8)
        dst = np.zeros(size, dtype=np.uint8)
        n = 10 if size >= 64 << 20 else 50
        key = "pybench-%d" % size
        rows.append(row(size, "put", "copy", measure(
            budget, n, lambda: client.put(key, src, durability="cache"))))
        rows.append(row(size, "get", "copy", measure(budget, n,
                                                     lambda: client.get_into(key, dst))))
        assert np.array_equal(src, dst), "bytes read back differ"

        def zput():
            r = client.reserve(key, size, durability="cache")
            r.commit()
        rows.append(row(size, "put", "zero_copy", measure(budget, n, zput)))

        def zget():
            client.view(key).release()
        rows.append(row(size, "get", "zero_copy", measure(budget, n, zget)))
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
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tool", required=True, help="the tierpool command-line tool")
    ap.add_argument("--socket", default=None)
    ap.add_argument("--seconds", type=float, default=0.4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    client = tierpool.Client(a.socket, "pybench")
    cpp, py = {}, {}
    for _ in range(a.rounds):
        cmd = [a.tool, "bench", "--json", "--seconds", str(a.seconds)]
        if a.socket:
            cmd += ["--socket", a.socket]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        for r in json.loads(out):
            cpp.setdefault((r["size"], r["op"], r["path"]), []).append(r["gbps"])
        for r in python_rows(client, a.seconds):
            py.setdefault((r["size"], r["op"], r["path"]), []).append(r["gbps"])
    mean = lambda v: sum(v) / len(v)  # noqa: E731
    table = []
    print("| size | op | path | C++ GB/s | Python GB/s | Python / C++ |")
    print("|---:|---|---|---:|---:|---:|")
    for key in sorted(py, key=lambda k: (k[0], k[1], k[2])):
        size, op, path = key
        ref = cpp.get((size, op, "copy" if path == "bytes" else path))
        c, p = (mean(ref) if ref else None), mean(py[key])
        ratio = p / c if c else None
        table.append({"size": size, "op": op, "path": path, "cpp_gbps": c, "python_gbps": p,
                      "ratio": ratio})
        label = "%d KiB" % (size >> 10) if size < 1 << 20 else "%d MiB" % (size >> 20)
        print("| %s | %s | %s%s | %s | %.3f | %s |" % (
            label, op, path, " (vs C++ copy)" if path == "bytes" else "",
            "%.3f" % c if c else "-", p, "%.2f" % ratio if ratio else "-"))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(table, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
