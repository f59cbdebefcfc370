#!/usr/bin/python3
"""The host's time per op by cost-model class, from what benchmarks/eager_op_host_bench.py
measured (each top-level aten op's calls and host microseconds under PyTorch's profiler), as the
per-class `dispatches` a device profile carries: each class's host time over the elementwise
class's.

An eager step's host also spends time between its ops (Python, autograd's engine, views and
bookkeeping such as `item` and `detach`, which launch no kernel). That time is spread evenly over
the step's kernel ops: each class's host time per op is its own ops' time plus that share, which
makes the classes' ratios as they are in the whole step, not as the ops alone show them
(`--own-time-only` leaves that share out). The
optimizer's multi-tensor calls are spread over the parameters they update (a schedule step
each, `--parameters`) and take no share: that time is the forward's Python and autograd's.

  scripts/host-costs-from-eager.py docs/data/gpu-h200/eager-op-host-h200.json [--json OUT]
"""
import argparse
import json
import sys

# The top-level ops eager PyTorch issues, by the class of the kernels the traced schedule times
# them as (prefetch/cost_model.cc, ClassifyOp). An eval-mode batch norm's kernel is elementwise,
# but the host pays a norm's call for it (cuDNN's), so it is a norm here.
CLASSES = {
    "conv": {"conv2d", "convolution", "convolution_backward"},
    "gemm": {"linear", "mm", "addmm", "matmul", "bmm", "baddbmm"},
    "norm": {"batch_norm", "layer_norm", "group_norm", "native_batch_norm_backward",
             "native_layer_norm_backward", "native_group_norm_backward"},
    "attention": {"scaled_dot_product_attention", "_scaled_dot_product_cudnn_attention_backward",
                  "_scaled_dot_product_efficient_attention_backward",
                  "_scaled_dot_product_flash_attention_backward"},
    "reduction": {"sum", "mean", "amax", "max", "adaptive_avg_pool2d", "max_pool2d",
                  "max_pool2d_with_indices_backward", "avg_pool2d", "var_mean"},
    "copy": {"cat", "to", "contiguous", "clone", "select_backward", "slice_backward",
             "embedding", "embedding_dense_backward", "index_select", "gather"},
    # Adam's multi-tensor kernels: their time is spread over the parameters (one schedule step
    # each), below.
    "optimizer": set(),
    # Ops that launch no kernel: views, and bookkeeping.
    "none": {"view", "reshape", "transpose", "t", "permute", "slice", "select", "narrow",
             "unsqueeze", "squeeze", "flatten", "unflatten", "expand", "detach", "detach_",
             "item", "dropout", "lift_fresh", "empty"},
}


def class_of(op):
    if op.startswith("_foreach_"):
        return "optimizer"
    for c, names in CLASSES.items():
        if op in names:
            return c
    return "elementwise"  # the long tail, as in ClassifyOp


def per_class(w, decode_gemv, spread):
    """Each class's calls and host us a step for one workload, and the time outside them."""
    calls, host = {}, {}
    for op, v in w["ops"].items():
        c = class_of(op)
        if c == "gemm" and decode_gemv:
            c = "gemv"
        calls[c] = calls.get(c, 0) + v["calls_per_step"]
        host[c] = host.get(c, 0) + v["calls_per_step"] * v["host_us_per_call"]
    if "optimizer" in calls:
        calls["optimizer"] = w.get("parameters", 0) or calls["optimizer"]
    # The optimizer's few multi-tensor calls take no share of the Python and autograd time.
    steps = sum(n for c, n in calls.items() if c not in ("none", "optimizer"))
    inside = sum(t for c, t in host.items() if c != "none")
    between = (w["profiled_step_ms"] * 1e3 - inside) / steps if spread else 0.0
    return calls, host, between


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
    order = ["conv", "gemm", "gemv", "attention", "norm", "elementwise", "reduction", "copy",
             "optimizer"]
    pooled = {c: [0.0, 0.0] for c in order}  # calls, host us (each op's own plus its share)
    rows = {}
    print("host us per op (%s), scaled by eager over profiled step" % (
        "own time" if a.own_time_only else "own time + share of the time between ops"))
    print("%-14s %8s %7s " % ("workload", "between", "scale") + " ".join("%11s" % c for c in order))
    for name, w in data["workloads"].items():
        w = dict(w, parameters=int(params.get(name, 0)))
        calls, host, between = per_class(w, decode_gemv=not w["grad"] and name.startswith("decode"),
                                          spread=not a.own_time_only)
        # The profiler lengthens every op; the eager step over the profiled one scales it off.
        scale = w["eager_ms"] / w["profiled_step_ms"]
        row = {}
        for c in order:
            if calls.get(c):
                us = host[c] / calls[c] + (between if c != "optimizer" else 0)
                row[c] = {"ops": calls[c], "host_us": us * scale}
                pooled[c][0] += calls[c]
                pooled[c][1] += calls[c] * us * scale
        rows[name] = {"between_us": between * scale, "classes": row}
        print("%-14s %8.1f %7.2f " % (name, between * scale, scale) + " ".join(
            "%11s" % ("%.1f" % row[c]["host_us"] if c in row else "-") for c in order))
    base = pooled["elementwise"][1] / pooled["elementwise"][0]
    dispatches = {c: round(pooled[c][1] / pooled[c][0] / base, 2) for c in order if pooled[c][0]}
    print("%-14s %8s %7s " % ("all (pooled)", "", "") + " ".join(
        "%11s" % ("%.1f" % (pooled[c][1] / pooled[c][0]) if pooled[c][0] else "-") for c in order))
    print("%-14s %8s %7s " % ("dispatches", "", "") + " ".join(
        "%11s" % (dispatches[c] if c in dispatches else "-") for c in order))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"source": a.measured, "elementwise_host_us": base, "dispatches": dispatches,
                       "workloads": rows}, f, indent=2)


if __name__ == "__main__":
    sys.exit(main())
