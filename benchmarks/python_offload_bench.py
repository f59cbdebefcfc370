#!/usr/bin/python3
"""A whole training step under its plan (tierpool.torch.offload) beside the same training
without offload, in one run: step time, working set against the budget, and what the executor
did, for the four models of tests/python/offload_models.py at several budgets.

Starts its own tierpoold (hbm: the host stand-in) and, per model, trains plainly and then under
each budget, from the same seed; each run's step time is the median of its steps after the
first (the first offloaded step is the recorded one, run plainly). Ratios are to the plain
run's median in the same invocation.

    PYTHONPATH=build/ci/python /usr/bin/python3 benchmarks/python_offload_bench.py \\
        --tierpoold build/ci/store/tierpoold --tool build/ci/client/tierpool --json out.json

``--device PROFILE`` plans for that link instead of the one measured through the server (a
slow one makes moving every saved activation stall), and ``--recompute SHARE`` lets the plan
recompute saved activations for up to that share of the compute (docs/python.md, "Recompute").
"""

import argparse
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

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "python"))
import offload_models  # noqa: E402


def start(tierpoold, dram, hbm):
    d = tempfile.mkdtemp(prefix="tierpool-bench-")
    sock = os.path.join(d, "s.sock")
    proc = subprocess.Popen([tierpoold, "--socket", sock, "--dram", dram, "--hbm", hbm,
                             "--busy-poll-us", "0", "--metrics-listen", "off", "--no-populate",
                             "--log-level",
                             "warn"])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            tierpool.Client(sock).close()
            return proc, sock
        except tierpool.Unavailable:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("tierpoold did not start")


def run(sock, case, budget, steps, **options):
    """Trains; returns (losses, step times, the closed job or None)."""
    model = case.build()
    opt = case.optimizer(model.parameters())
    torch.manual_seed(1)
    losses, times = [], []
    with tierpool.Client(sock, "bench-%s-%s" % (case.name, budget)) as c:
        job = (tt.offload(model, opt, c, budget=budget, at_least_floor=True, **options)
               if budget else None)
        for i in range(steps):
            t0 = time.perf_counter()
            x, y = case.batch(i)
            loss = case.loss(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            times.append(time.perf_counter() - t0)
            losses.append(loss.item())
        if job is not None:
            job.close()
    return losses, times, job


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tierpoold", required=True)
    ap.add_argument("--tool", required=True, help="the tierpool tool (plans are made with it)")
    ap.add_argument("--scale", type=int, default=2, help="model size (offload_models.cases)")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--budgets", default="80%,60%,40%")
    ap.add_argument("--models", default="mlp,resnet18,encoder,tied")
    ap.add_argument("--device", help="a device profile to plan for (default: the measured link)")
    ap.add_argument("--recompute", default="0", help="share of the compute recompute may add")
    ap.add_argument("--json")
    a = ap.parse_args()
    options = {"recompute": a.recompute}
    if a.device:
        options["device"] = a.device
    os.environ["TIERPOOL_TOOL"] = a.tool
    torch.backends.mkldnn.enabled = False  # the bit-identical check needs PyTorch's kernels
    proc, sock = start(a.tierpoold, "6G", "3G")
    rows = []
    try:
        for case in offload_models.cases(a.scale):
            if case.name not in a.models.split(","):
                continue
            ref_losses, ref_times, _ = run(sock, case, None, a.steps)
            plain = statistics.median(ref_times[1:])
            print("%-9s plain: %.3f s a step" % (case.name, plain), flush=True)
            for budget in a.budgets.split(","):
                losses, times, job = run(sock, case, budget, a.steps, **options)
                step = statistics.median(times[1:])
                reports = job.reports
                row = {
                    "model": case.name, "budget": budget, "steps": a.steps,
                    "no_offload_peak": job.no_offload_peak, "budget_bytes": job.budget,
                    "floor_bytes": job.floor[0], "hbm_budget": job.hbm_budget,
                    "working_set": max(r.working_set for r in reports),
                    "hbm_peak": max(r.hbm_peak for r in reports),
                    "outside_peak": max(r.outside_peak for r in reports),
                    "plain_s": plain, "offload_s": step, "ratio": step / plain,
                    "carried_out": min(r.carried_out for r in reports),
                    "skipped_absent": sum(r.skipped_absent for r in reports),
                    "link_in": reports[-1].link_in, "link_out": reports[-1].link_out,
                    "hits": reports[-1].hits, "late": reports[-1].late,
                    "misses": reports[-1].misses, "late_wait_us": reports[-1].late_wait_us,
                    "identical": losses == ref_losses,
                    "recomputes": len(job.plan_doc.get("recomputes", [])),
                    "recomputed": reports[-1].recomputed,
                    "plan_stall_ms": job.plan_summary.strip().splitlines()[-1],
                }
                rows.append(row)
                print("%-9s %4s: kept %3.0f%% (floor %3.0f%%), working set %6.1f MiB of %6.1f "
                      "(%.2fx), step %.3f s = %.3fx plain, %.1f%% actions carried out, "
                      "%.1f/%.1f MiB in/out, %d late, %d misses, %d recomputed, identical %s"
                      % (case.name, budget, 100 * job.budget / job.no_offload_peak,
                         100 * job.floor[0] / job.no_offload_peak, row["working_set"] / 2**20,
                         job.budget / 2**20, row["working_set"] / job.budget, step,
                         row["ratio"], 100 * row["carried_out"], row["link_in"] / 2**20,
                         row["link_out"] / 2**20, row["late"], row["misses"],
                         row["recomputed"], row["identical"]), flush=True)
                print("          plan: %s" % " / ".join(
                    line.strip() for line in job.plan_summary.strip().splitlines()[:3]))
    finally:
        proc.terminate()
        proc.wait()
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"date": time.strftime("%Y-%m-%d"), "scale": a.scale,
                       "device": a.device, "recompute": a.recompute, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
