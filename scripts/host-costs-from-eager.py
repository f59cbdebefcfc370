#!/usr/bin/python3
"""The host's time per op by cost-model class, from what benchmarks/eager_op_host_bench.py
measured (each top-level aten op's calls and host microseconds under PyTorch's profiler), as the
per-class `dispatches` a device profile carries: each class's host time over the elementwise
class's (compiler_hooks/torch/tierpool_host_costs.py maps ops to classes).

An eager step's host also spends time between its ops (Python, autograd's engine, views and
bookkeeping such as `item` and `detach`, which launch no kernel). Without --own-time-only that
time is spread evenly over the step's kernel ops, each class's host time per op being its own
ops' time plus that share; with it, each class's ops' own time alone (what `h100` and `gh200`
take, docs/cost-model.md). The optimizer's multi-tensor calls are spread over the parameters
they update (a schedule step each, `--parameters`) and take no share of the time between ops.

  scripts/host-costs-from-eager.py docs/data/gpu-h200/eager-op-host-h200.json --own-time-only \\
      --parameters resnet50=161 --parameters vit_b_16=152 --parameters transformer12=144
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                "compiler_hooks", "torch"))
import tierpool_host_costs as hc  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("measured", help="benchmarks/eager_op_host_bench.py --json output")
    ap.add_argument("--json", help="write the per-class table and dispatches here")
    ap.add_argument("--own-time-only", action="store_true",
                    help="each class's ops' own time, without a share of the time between ops")
    ap.add_argument("--parameters", action="append", default=[], metavar="WORKLOAD=N",
                    help="parameters the workload's optimizer updates (a schedule step each)")
    a = ap.parse_args()
    with open(a.measured) as f:
        data = json.load(f)
    params = dict(p.split("=") for p in a.parameters)
    order = hc.ORDER
    rows = {}
    measured = hc.measured_classes(data, params, spread=not a.own_time_only)
    print("host us per op (%s), scaled by eager over profiled step" % (
        "own time" if a.own_time_only else "own time + share of the time between ops"))
    print("%-14s %8s " % ("workload", "between") + " ".join("%11s" % c for c in order))
    for name, (classes, between) in measured.items():
        rows[name] = {"between_us": between,
                      "classes": {c: {"ops": n, "host_us": us} for c, (n, us) in classes.items()}}
        print("%-14s %8.1f " % (name, between) + " ".join(
            "%11s" % ("%.1f" % classes[c][1] if c in classes else "-") for c in order))
    ratios, per_op = hc.dispatches([classes for classes, _ in measured.values()])
    if not ratios:
        sys.exit("host-costs-from-eager: no elementwise ops measured, nothing to divide by")
    print("%-14s %8s " % ("all (pooled)", "") + " ".join(
        "%11s" % ("%.1f" % per_op[c] if c in per_op else "-") for c in order))
    print("%-14s %8s " % ("dispatches", "") + " ".join(
        "%11s" % ("%.2f" % ratios[c] if c in ratios else "-") for c in order))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"source": a.measured, "own_time_only": a.own_time_only,
                       "elementwise_host_us": per_op["elementwise"],
                       "dispatches": {c: round(r, 2) for c, r in ratios.items()},
                       "workloads": rows}, f, indent=2)


if __name__ == "__main__":
    sys.exit(main())
