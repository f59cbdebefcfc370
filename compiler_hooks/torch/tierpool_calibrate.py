#!/usr/bin/python3
"""Measures a model's steps on a device and writes a calibrated device profile.

Run by `tierpool schedule calibrate`. Traces the model as `from-torch` does (same arguments, same
steps), then runs the traced graph on real tensors, node by node, on the device (--device-kind
cuda, or cpu where there is no GPU): each step is run --warmup times, then timed --repeat times
(CUDA events around the op on a GPU, with the GPU kept busy while the host queues it so that
the events time its kernels alone; the host clock after a synchronize on the CPU) and its
median kept. Optimizer steps share one timed torch.optim update of every parameter, by bytes.

It writes:
  --out PROFILE.json   the base profile with each op class's compute and memory efficiency
                       replaced by what the measured steps reached (a class with no measured
                       step keeps the base's), and the host's dispatch time per kernel;
  --measured S.json    the schedule with each measured step's compute_us and `measured` set,
                       so replay and plan use the measured times instead of the model's;
  --table T.json       per op class and in total: steps, modeled, measured and calibrated
                       milliseconds; and the whole step as PyTorch runs it eagerly.
With --host-costs (the default on a GPU) it also profiles the eager step on the host
(tierpool_host_costs.py) and sets each class it saw to its measured host time per op over an
elementwise op's (`dispatches`) before the host time per op is fitted to the eager step.
The modeled times come from `tierpool-schedule` (--schedule-tool) under the base profile.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tierpool_host_costs  # noqa: E402
import tierpool_torch_schedule as hook  # noqa: E402


def fail(msg):
    sys.stderr.write("tierpool calibrate: " + msg + "\n")
    sys.exit(2)


class Timer:
    """Median time of a callable on the device, in microseconds. With gpu_only (one op's
    kernels), the GPU is kept busy while the host queues the op, so the events time the kernels
    alone: otherwise the GPU waits between them for Python to dispatch the op (20-25 us on an
    H100 host, more than most kernels of a batch-32 step take)."""

    def __init__(self, torch, kind, warmup, repeat, gpu_only=False):
        self.torch, self.kind, self.warmup, self.repeat = torch, kind, warmup, repeat
        self.sleep = gpu_only and kind == "cuda" and hasattr(torch.cuda, "_sleep")

    def __call__(self, fn):
        torch = self.torch
        for _ in range(self.warmup):
            fn()
        samples = []
        for _ in range(self.repeat):
            if self.kind == "cuda":
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                if self.sleep:
                    torch.cuda._sleep(1 << 20)  # about 0.5 ms of cycles: the queue fills meanwhile
                start.record()
                fn()
                end.record()
                end.synchronize()
                samples.append(start.elapsed_time(end) * 1000.0)
            else:
                t0 = time.perf_counter()
                fn()
                samples.append((time.perf_counter() - t0) * 1e6)
        return statistics.median(samples)


def materialize(node, env):
    def load(x):
        if isinstance(x, (list, tuple)):
            return type(x)(load(v) for v in x)
        if hasattr(x, "name") and hasattr(x, "op"):
            return env[x.name]
        return x
    return load(node.args), {k: load(v) for k, v in node.kwargs.items()}


def dispatch_us(torch, kind, n=2000):
    """Host time to issue one small kernel, queued back to back."""
    x = torch.zeros(16, device=kind)
    for _ in range(100):
        x.add_(1)
    if kind == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        x.add_(1)
    if kind == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e6 / n


def eager_iteration_us(a, timer, tuned=False, host_ops=None):
    """The whole step as PyTorch runs it eagerly (forward, backward, the optimizer's update; or
    the forward pass alone with --inference): what a user of the model sees, against which the
    node-by-node sum and the model are compared. `tuned` is the same step as a tuned training
    loop runs it: cuDNN's autotuner on, 4-D tensors channels-last, the fused Adam. A dict
    `host_ops` gets the top-level ops of 3 more steps run under the host profiler ("ops",
    "steps", "wall_ms")."""
    torch, model, inputs = hook.build_model(a)
    saved_benchmark = torch.backends.cudnn.benchmark

    def timed(step):
        us = timer(step)
        if host_ops is not None:
            sync = torch.cuda.synchronize if a.device == "cuda" else (lambda: None)
            host_ops["ops"], host_ops["wall_ms"] = tierpool_host_costs.top_level_ops(step, 3, sync)
            host_ops["steps"] = 3
        return us

    if tuned:
        torch.backends.cudnn.benchmark = True
        model = model.to(memory_format=torch.channels_last)
        inputs = [x.contiguous(memory_format=torch.channels_last) if x.dim() == 4 else x
                  for x in inputs]
    try:
        if a.inference:
            def step():
                with torch.no_grad():
                    model(*inputs)
            return timed(step)
        params = [p for p in model.parameters() if p.requires_grad]
        opt = None
        if a.optimizer == "adam":
            try:
                opt = torch.optim.Adam(params, fused=True) if tuned else torch.optim.Adam(params)
            except (TypeError, RuntimeError):  # no fused Adam in this PyTorch or for this device
                opt = torch.optim.Adam(params)
        elif a.optimizer == "sgd":
            opt = torch.optim.SGD(params, lr=0.01, momentum=0.9)

        def step():
            for p in params:
                p.grad = None
            hook.first_tensor(model(*inputs)).float().sum().backward()
            if opt is not None:
                opt.step()
        return timed(step)
    finally:
        torch.backends.cudnn.benchmark = saved_benchmark


def main():
    ap = hook.build_parser()
    ap.description = __doc__.split("\n")[0]
    ap.add_argument("--device-kind", choices=["cuda", "cpu"], help="default: cuda if available")
    ap.add_argument("--base", default="h100", help="the built-in profile (or JSON file) to start from")
    ap.add_argument("--name", help="the calibrated profile's name (default: BASE-calibrated)")
    ap.add_argument("--measured", help="write the schedule with measured step times here")
    ap.add_argument("--table", help="write modeled-versus-measured by op class here (JSON)")
    ap.add_argument("--schedule-tool", required=True, help="the tierpool-schedule binary")
    ap.add_argument("--host-costs", action=argparse.BooleanOptionalAction, default=None,
                    help="measure each op class's host time per op (default: on a GPU only; "
                         "on the CPU an op's host time is its computation)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=10)
    a = ap.parse_args()
    if a.warmup < 0 or not 1 <= a.repeat <= 10000:
        fail("--warmup must be >= 0 and --repeat in [1, 10000]")
    import torch
    kind = a.device_kind or ("cuda" if torch.cuda.is_available() else "cpu")
    if kind == "cuda" and not torch.cuda.is_available():
        fail("--device-kind cuda, but torch sees no GPU")
    a.device = kind
    schedule, gm, args, node_of_step = hook.trace(a)
    timer = Timer(torch, kind, a.warmup, a.repeat, gpu_only=True)
    whole_step = Timer(torch, kind, a.warmup, a.repeat)

    # Run the graph once, node by node, timing each node that is a step.
    step_of_node = {name: s for s, name in node_of_step.items()}
    env, measured = {}, {}
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(args):
        fail("the traced graph takes %d inputs, %d given" % (len(placeholders), len(args)))
    with torch.no_grad():
        for n, v in zip(placeholders, args):
            env[n.name] = v
        for n in gm.graph.nodes:
            if n.op != "call_function":
                continue
            fargs, fkwargs = materialize(n, env)
            env[n.name] = n.target(*fargs, **fkwargs)
            if n.name in step_of_node:
                measured[step_of_node[n.name]] = timer(lambda: n.target(*fargs, **fkwargs))
    del env

    # Optimizer steps: one torch.optim update of every parameter together (its multi-tensor
    # path, as a training loop runs it), shared among the update steps by the bytes each
    # touches. Timing one parameter's update alone measures Python's overhead, not the GPU's.
    params = dict(zip([t["name"] for t in schedule["tensors"] if t["kind"] == "WEIGHT"], args))
    updates = []
    for i, st in enumerate(schedule["steps"]):
        opt, _, pname = st["name"].partition("_update.")
        if opt in ("adam", "sgd") and pname in params:
            updates.append((i, opt, pname))
    if updates:
        ps = []
        for _, _, pname in updates:
            p = params[pname].detach().clone().requires_grad_(True)
            p.grad = torch.randn_like(p)
            ps.append(p)
        o = (torch.optim.Adam(ps) if updates[0][1] == "adam"
             else torch.optim.SGD(ps, lr=0.1, momentum=0.9))
        all_us = timer(o.step)
        weight = [max(1, int(schedule["steps"][i]["bytes_touched"])) for i, _, _ in updates]
        for (i, _, _), w in zip(updates, weight):
            measured[i] = all_us * w / sum(weight)
        del ps, o

    host_costs = a.host_costs if a.host_costs is not None else kind == "cuda"
    host_ops = {} if host_costs else None
    eager_us = eager_iteration_us(a, whole_step, host_ops=host_ops)
    ratios, per_op = {}, {}
    if host_ops:
        n = host_ops["steps"]
        workload = {"eager_ms": eager_us / 1000.0, "profiled_step_ms": host_ops["wall_ms"] / n,
                    "ops": tierpool_host_costs.per_step(host_ops["ops"], n)}
        classes, _ = tierpool_host_costs.class_host_us(workload, parameters=len(updates))
        ratios, per_op = tierpool_host_costs.dispatches([classes])
        # A matrix multiply's call costs the host alike whatever its shape (on an H200: 37.8 us
        # for a training GEMM, 36.8 for a decode's GEMV), so a GEMM's ratio serves both.
        if "gemm" in ratios:
            ratios.setdefault("gemv", ratios["gemm"])
    tuned_us = eager_iteration_us(a, whole_step, tuned=True) if kind == "cuda" else None

    for i, us in measured.items():
        schedule["steps"][i]["compute_us"] = us
        schedule["steps"][i]["measured"] = True

    with tempfile.TemporaryDirectory() as tmp:
        sched_path = os.path.join(tmp, "measured.json")
        with open(sched_path, "w") as f:
            json.dump(schedule, f)
        # The base profile's view of each step, and the fit.
        fit_path = os.path.join(tmp, "fit.json")
        base = a.base
        if ratios:
            # The base with the measured host ratios: fit-profile then fits dispatch_us with them.
            shown = subprocess.run([a.schedule_tool, "schedule", "profile", "--device", a.base],
                                   check=True, capture_output=True, text=True).stdout
            profile = json.loads(shown)
            for c, r in ratios.items():
                profile["ops"].setdefault(c, {})["dispatches"] = round(r, 3)
            base = os.path.join(tmp, "base.json")
            with open(base, "w") as f:
                json.dump(profile, f)
        # The host's time per op is what makes the measured kernels, issued one by one, last
        # as long as the eager step did (docs/cost-model.md); a bare queued kernel's issue time
        # (dispatch_us) is its floor, when the kernels alone fill the step.
        cmd = [a.schedule_tool, "schedule", "fit-profile", sched_path, "--device", base,
               "--json", fit_path, "--eager-ms", "%.4f" % (eager_us / 1000.0),
               "--name", a.name or (os.path.basename(a.base).replace(".json", "") + "-calibrated")]
        subprocess.run(cmd, check=True)
        with open(fit_path) as f:
            fit = json.load(f)
        fit["profile"]["dispatch_us"] = max(fit["profile"]["dispatch_us"], dispatch_us(torch, kind))
    with open(a.out, "w") as f:
        json.dump(fit["profile"], f, indent=2)
    if a.measured:
        with open(a.measured, "w") as f:
            json.dump(schedule, f)
    rows = fit["by_class"]
    total = {k: sum(c[k] for c in rows) for k in ("modeled_ms", "measured_ms", "calibrated_ms")}
    gpu = torch.cuda.get_device_name() if kind == "cuda" else "cpu"
    if a.table:
        with open(a.table, "w") as f:
            json.dump({"device": gpu, "torch": torch.__version__, "by_class": rows, "total": total,
                       "eager_iteration_ms": eager_us / 1000.0,
                       "host_dispatches": ratios, "host_us_per_op": per_op,
                       "tuned_iteration_ms": tuned_us / 1000.0 if tuned_us else None}, f, indent=2)
    sys.stderr.write("calibrated on %s (%s): %d of %d steps measured; by op class, ms (modeled on %s, "
                     "measured, under the calibrated profile):\n"
                     % (kind, gpu, len(measured), len(schedule["steps"]), a.base))
    for c in rows + [dict(total, **{"class": "total", "steps": len(measured)})]:
        sys.stderr.write("  %-12s %5d steps %10.3f %10.3f %10.3f\n"
                         % (c["class"], c["steps"], c["modeled_ms"], c["measured_ms"], c["calibrated_ms"]))
    if ratios:
        sys.stderr.write("  the host's time per op over an elementwise op's (%.1f us): %s\n" % (
            per_op["elementwise"], ", ".join("%s %.2f" % (c, r) for c, r in ratios.items())))
    sys.stderr.write("  the whole step run eagerly by PyTorch: %.3f ms" % (eager_us / 1000.0))
    if tuned_us:
        sys.stderr.write("; tuned (cuDNN autotuner, channels-last, fused Adam): %.3f ms"
                         % (tuned_us / 1000.0))
    sys.stderr.write("\n")


if __name__ == "__main__":
    main()
