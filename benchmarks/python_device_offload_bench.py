#!/usr/bin/env python3
"""Activation offload on a GPU through tierpoold's device hbm, against the same training step
without offload and with offload through host memory, in one run (issue #15).

Starts its own tierpoold with hbm in GPU 0's memory (--hbm-device 0) and trains an MLP whose
saved activations are far larger than that hbm: with tierpool.torch.offload_activations they go
into the device arena and the server moves them to dram and back on the copy engines
("device"), or, with device_hbm=False, the client copies each to and from host memory ("host").
Reports each mode's step time (median), its ratio to the step without offload, and the bytes
the server moved each way per step.

    python3 benchmarks/python_device_offload_bench.py --tierpoold build/cuda/store/tierpoold

--breakdown then runs a few more device-offload steps with the GPU synchronized after forward,
backward and the optimizer (so the phases do not overlap, unlike the timed steps) and prints
each phase's time and the host's time inside each of the offload hooks' parts, per step: where
the step's time over no offload goes.
"""

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch

import tierpool
import tierpool.torch as tt


class Mlp(torch.nn.Module):
    def __init__(self, d, layers):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(d, d) for _ in range(layers))

    def forward(self, x):
        for layer in self.layers:
            x = torch.relu(layer(x))
        return x.square().mean()


def start(tierpoold, hbm, dram, extra):
    d = tempfile.mkdtemp(prefix="tierpool-bench-")
    sock = os.path.join(d, "s.sock")
    proc = subprocess.Popen([tierpoold, "--socket", sock, "--hbm", hbm, "--hbm-device", "0",
                             "--dram", dram, "--metrics-listen", "off", "--log-level", "warn"]
                            + extra)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            tierpool.Client(sock).close()
            return proc, sock
        except tierpool.Unavailable:
            time.sleep(0.05)
    proc.kill()
    sys.exit("tierpoold did not start")


def links(c):
    return {k: v for k, v in c.stat()["counters"].items()
            if k.startswith("link_") and k.endswith("_bytes")}


def steps(model, opt, x, n, acts):
    times = []
    for _ in range(n):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        if acts is not None:
            with acts:
                loss = model(x)
        else:
            loss = model(x)
        opt.zero_grad()
        loss.backward()
        opt.step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        if acts is not None:
            acts.flush()
    return times


class NoOffload(contextlib.nullcontext):
    """--breakdown's phases without offload: a context that does nothing, and no flush."""

    def flush(self):
        pass


# The offload's parts whose host time --breakdown reports (inclusive: _pack holds _put_device).
PARTS = ("_pack", "_unpack", "_put_device", "_fetch_device", "_wait_put", "_release_views",
         "_bound_inflight", "_prefetch_before", "_collect", "flush")


def breakdown(model, opt, x, acts, n):
    """Per-step means: each phase with the GPU synchronized after it, and the host's time in
    each part of the offload (wrapped on this instance only)."""
    spent = {p: 0.0 for p in PARTS if hasattr(acts, p)}
    for p in spent:
        f = getattr(acts, p)

        def timed(*args, _f=f, _p=p, **kwargs):
            t = time.perf_counter()
            try:
                return _f(*args, **kwargs)
            finally:
                spent[_p] += time.perf_counter() - t

        setattr(acts, p, timed)
    phases = {"forward": 0.0, "backward": 0.0, "optimizer": 0.0, "flush": 0.0}
    for _ in range(n):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with acts:
            loss = model(x)
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        opt.zero_grad()
        loss.backward()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        opt.step()
        torch.cuda.synchronize()
        t3 = time.perf_counter()
        acts.flush()
        torch.cuda.synchronize()
        t4 = time.perf_counter()
        for k, a, b in (("forward", t0, t1), ("backward", t1, t2), ("optimizer", t2, t3),
                        ("flush", t3, t4)):
            phases[k] += b - a
    return ({k: 1e3 * v / n for k, v in phases.items()},
            {k: 1e3 * v / n for k, v in spent.items()})


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tierpoold", required=True)
    ap.add_argument("--hbm", default="1G", help="the server's device hbm")
    ap.add_argument("--dram", default="8G")
    ap.add_argument("--d", type=int, default=4096, help="the MLP's width")
    ap.add_argument("--batch", type=int, default=8192)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--server-arg", action="append", default=[],
                    help="passed to tierpoold (e.g. --server-arg=--hbm-high-watermark=0.6)")
    ap.add_argument("--inflight-acts", type=float, default=2,
                    help="the offload's prefetch and in-flight bytes, in saved activations")
    ap.add_argument("--modes", default="none,device,host,none",
                    help="in this order: none, device, host (a mode given twice is run twice)")
    ap.add_argument("--breakdown", type=int, default=0, metavar="STEPS",
                    help="then this many synchronized device-offload steps, phase by phase")
    ap.add_argument("--json", help="write the results here")
    a = ap.parse_args()

    proc, sock = start(a.tierpoold, a.hbm, a.dram, a.server_arg)
    out = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__,
           "hbm": a.hbm, "server_args": a.server_arg, "inflight_acts": a.inflight_acts,
           "d": a.d, "batch": a.batch, "layers": a.layers, "modes": {}}
    try:
        with tierpool.Client(sock) as c:
            assert c.hbm_device == 0, "the server's hbm is not GPU 0's memory"
            torch.manual_seed(0)
            model = Mlp(a.d, a.layers).cuda()
            opt = torch.optim.SGD(model.parameters(), lr=1e-4)
            x = torch.randn(a.batch, a.d, device="cuda")
            act_bytes = a.batch * a.d * 4
            window = int(a.inflight_acts * act_bytes)
            out["saved_bytes_per_step"] = (a.layers + 1) * act_bytes
            for mode in a.modes.split(","):
                acts = None
                if mode != "none":
                    acts = tt.offload_activations(c, min_bytes=1 << 20,
                                                  device_hbm=(mode == "device"),
                                                  prefetch_bytes=window,
                                                  inflight_bytes=window)
                steps(model, opt, x, a.warmup, acts)
                before = links(c)
                t = steps(model, opt, x, a.steps, acts)
                after = links(c)
                moved = {k: (after[k] - before.get(k, 0)) / a.steps for k in after
                         if after[k] != before.get(k, 0)}
                key = mode if mode not in out["modes"] else mode + "_again"
                out["modes"][key] = {"step_ms": statistics.median(t) * 1e3,
                                     "steps_ms": [round(s * 1e3, 2) for s in t],
                                     "moved_per_step": moved}
                if acts is not None:
                    assert acts.hbm_device == (0 if mode == "device" else None)
            if a.breakdown:
                for mode in ("none", "device"):
                    acts = NoOffload() if mode == "none" else tt.offload_activations(
                        c, min_bytes=1 << 20, prefetch_bytes=window, inflight_bytes=window)
                    steps(model, opt, x, a.warmup, acts if mode == "device" else None)
                    try:
                        ph, parts = breakdown(model, opt, x, acts, a.breakdown)
                    except Exception as e:  # a diagnostic: the timed modes above still count
                        print("breakdown of %s failed: %r" % (mode, e))
                        continue
                    out.setdefault("breakdown", {})[mode] = {"phases_ms": ph, "host_ms": parts}
                    print("%-7s phases (ms/step): %s" % (mode, ", ".join(
                        "%s %.2f" % kv for kv in ph.items())))
                    if parts:
                        print("        host time in the offload's parts (ms/step, inclusive): "
                              + ", ".join("%s %.2f" % kv for kv in parts.items()))
            hbm = [t for t in c.stat()["tiers"] if t["tier"] == "hbm"][0]
            out["checksum_failures"] = hbm["checksum_failures"]
    finally:
        proc.terminate()
        proc.wait(30)
    base = min(m["step_ms"] for k, m in out["modes"].items() if k.startswith("none"))
    for mode, m in out["modes"].items():
        m["vs_no_offload"] = m["step_ms"] / base
        moved = ", ".join("%s %.0f MiB" % (k[5:-6], v / (1 << 20))
                          for k, v in sorted(m["moved_per_step"].items()))
        print("%-11s %8.2f ms/step  %5.2fx no offload   moved per step: %s"
              % (mode, m["step_ms"], m["vs_no_offload"], moved or "-"))
    print("saved per step: %.0f MiB; checksum failures: %d"
          % (out["saved_bytes_per_step"] / (1 << 20), out["checksum_failures"]))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
