"""The host's time per op of an eager PyTorch step, by the cost model's op class.

The cost model charges the host `dispatch_us` x the class's `dispatches` for each step it issues
(docs/cost-model.md): `dispatch_us` is an elementwise op's host time, and a class's `dispatches`
its ops' host time over an elementwise op's. This module measures those ratios: it profiles
eager steps on the host (torch.profiler, CPU activity), keeps each top-level aten op (one no
other aten op called; an autograd node's ops count as top-level) with its calls and host time,
maps each op to the class of the kernels the traced schedule times it as, and divides.

Used by benchmarks/eager_op_host_bench.py (which measures), scripts/host-costs-from-eager.py
(which turns a measurement into a profile's `dispatches`) and `tierpool schedule calibrate
--host-costs`.
"""
import time

# The top-level ops eager PyTorch issues, by the class of the kernels the traced schedule times
# them as (prefetch/cost_model.cc, ClassifyOp). An eval-mode batch norm's kernel is elementwise,
# but the host pays a norm's call for it (cuDNN's; HostClassOf), so it is a norm here.
CLASSES = {
    "conv": {"conv1d", "conv2d", "conv3d", "convolution", "convolution_backward"},
    "gemm": {"linear", "mm", "addmm", "matmul", "bmm", "baddbmm"},
    "norm": {"batch_norm", "layer_norm", "group_norm", "native_batch_norm_backward",
             "native_layer_norm_backward", "native_group_norm_backward"},
    "attention": {"scaled_dot_product_attention", "_scaled_dot_product_cudnn_attention_backward",
                  "_scaled_dot_product_efficient_attention_backward",
                  "_scaled_dot_product_flash_attention_backward"},
    "reduction": {"sum", "mean", "amax", "max", "adaptive_avg_pool2d", "max_pool2d",
                  "max_pool2d_with_indices_backward", "avg_pool2d", "var_mean",
                  "nll_loss", "nll_loss_backward", "cross_entropy_loss", "mse_loss"},
    "copy": {"cat", "to", "contiguous", "clone", "select_backward", "slice_backward",
             "embedding", "embedding_dense_backward", "index_select", "gather"},
    # Ops that launch no kernel: views, and bookkeeping.
    "none": {"view", "reshape", "transpose", "t", "permute", "slice", "select", "narrow",
             "unsqueeze", "squeeze", "flatten", "unflatten", "expand", "detach", "detach_",
             "item", "dropout", "lift_fresh", "empty", "alias", "as_strided", "_unsafe_view"},
}
# The classes a profile carries `dispatches` for, in the order tables show them.
ORDER = ["conv", "gemm", "gemv", "attention", "norm", "elementwise", "reduction", "copy",
         "optimizer"]


def class_of(op):
    """The class of a top-level aten op's name (without "aten::"), "none" for views."""
    if op.startswith("_foreach_") or op.startswith("_fused_adam") or op in ("adam", "sgd"):
        return "optimizer"  # the multi-tensor update of every parameter
    for c, names in CLASSES.items():
        if op in names:
            return c
    return "elementwise"  # the long tail, as in ClassifyOp


def top_level_ops(step, steps, sync=lambda: None):
    """{op: [calls, total host us]} over `steps` profiled runs of `step`, and their wall ms."""
    from torch.profiler import ProfilerActivity, profile
    sync()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        sync()
        wall_ms = (time.perf_counter() - t0) * 1e3
    ops = {}
    for e in prof.events():
        if not e.name.startswith("aten::"):
            continue
        parent, nested = e.cpu_parent, False
        while parent is not None:
            if parent.name.startswith("aten::"):
                nested = True
                break
            parent = parent.cpu_parent
        if nested:
            continue
        entry = ops.setdefault(e.name[len("aten::"):], [0, 0.0])
        entry[0] += 1
        entry[1] += e.cpu_time_total
    return ops, wall_ms


def per_step(ops, steps):
    """top_level_ops' {op: [calls, total us]} over `steps` steps as a workload's "ops":
    {op: {calls_per_step, host_us_per_call}}, the most time first."""
    return {k: {"calls_per_step": c / steps, "host_us_per_call": t / c}
            for k, (c, t) in sorted(ops.items(), key=lambda kv: -kv[1][1]) if c}


def class_host_us(workload, matmul_class="gemm", parameters=0, spread=False):
    """Each class's ops a step and host us per op for one measured workload, and the time
    between ops per op: {class: (ops, us)}, between_us.

    `workload` is what eager_op_host_bench.py writes per workload: "ops" {name: {calls_per_step,
    host_us_per_call}}, "eager_ms", "profiled_step_ms". Times are scaled by the eager step over
    the profiled one (the profiler lengthens every op). The optimizer's multi-tensor calls are
    spread over `parameters` (a schedule step each). With `spread`, each class's time per op
    also takes an even share of the time between ops (Python, autograd's engine, views); the
    optimizer takes none of it.
    """
    calls, host = {}, {}
    for op, v in workload["ops"].items():
        c = class_of(op)
        if c == "gemm":
            c = matmul_class
        calls[c] = calls.get(c, 0) + v["calls_per_step"]
        host[c] = host.get(c, 0) + v["calls_per_step"] * v["host_us_per_call"]
    if "optimizer" in calls and parameters:
        calls["optimizer"] = parameters
    steps = sum(n for c, n in calls.items() if c not in ("none", "optimizer"))
    inside = sum(t for c, t in host.items() if c != "none")
    between = (workload["profiled_step_ms"] * 1e3 - inside) / steps if spread and steps else 0.0
    scale = workload["eager_ms"] / workload["profiled_step_ms"]
    out = {}
    for c in ORDER:
        if calls.get(c):
            us = host[c] / calls[c] + (between if c != "optimizer" else 0.0)
            out[c] = (calls[c], us * scale)
    return out, between * scale


def measured_classes(data, parameters, spread=False):
    """class_host_us for each workload of an eager_op_host_bench.py result that ran:
    {name: (classes, between_us)}. A decode's matrix multiplies stream weights past one token's
    rows (the gemv class); `parameters` {name: N} are the updates of each training workload."""
    out = {}
    for name, w in data["workloads"].items():
        if "error" in w:
            continue
        matmul = "gemv" if not w["grad"] and name.startswith("decode") else "gemm"
        out[name] = class_host_us(w, matmul, int(parameters.get(name, 0)), spread)
    return out


def dispatches(per_workload):
    """Each class's host time per op pooled over workloads (by ops) over the elementwise
    class's: the profile's `dispatches`. `per_workload` is a list of class_host_us results'
    first parts. Classes never seen are left out; without elementwise ops, nothing."""
    pooled = {}
    for classes in per_workload:
        for c, (n, us) in classes.items():
            p = pooled.setdefault(c, [0.0, 0.0])
            p[0] += n
            p[1] += n * us
    if not pooled.get("elementwise", [0])[0]:
        return {}, {}
    per_op = {c: t / n for c, (n, t) in pooled.items() if n}
    base = per_op["elementwise"]
    return {c: per_op[c] / base for c in ORDER if c in per_op}, per_op
