#!/usr/bin/env python3
"""Where an eager PyTorch step's host time goes, op by op (issue #16: the cost model's host time
per op, `dispatch_us` x `dispatches`, by op class).

For each workload it measures the eager step (the host clock around it, the GPU synchronized;
median of --repeat after 3 warm-up steps), then profiles --profile-steps more on the host
(torch.profiler, CPU activity): every top-level aten op (one no other aten op called; an autograd
node's ops count as top-level) with its calls per step and its host time per call, inclusive of
what it calls (dispatch, the kernel's launch). What the ops' times do not cover is the Python
between them.
Workloads (the figures' models): resnet50, vit_b_16 and transformer12 training (bf16, Adam),
resnet18_inf (bf16 inference, no_grad), decode (Llama 3 8B's shape, bf16, batch 1, one token from
a --context KV cache, no_grad, the module as traced). Also the host time of a 16-element add_
issued back to back, with and without autograd recording (the calibration's `dispatch_us`).

    python3 benchmarks/eager_op_host_bench.py --json out.json   # from the repository root
"""

import argparse
import json
import statistics
import sys
import time

import torch

sys.path.insert(0, "compiler_hooks/torch")
import tierpool_host_costs  # noqa: E402
import tierpool_models  # noqa: E402


DEV = "cuda"


def sync():
    if DEV == "cuda":
        torch.cuda.synchronize()


def median_ms(f, n):
    ts = []
    for _ in range(n):
        sync()
        t0 = time.perf_counter()
        f()
        sync()
        ts.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ts)


def add_us(grad, n=4000):
    """Host time of a tiny add_ issued back to back (the kernel takes less than its issue)."""
    x = torch.zeros(16, device=DEV, requires_grad=False)
    w = torch.zeros(16, device=DEV, requires_grad=grad)
    with torch.set_grad_enabled(grad):
        for _ in range(200):
            y = x + w
        sync()
        t0 = time.perf_counter()
        for _ in range(n):
            y = x + w
        sync()
    del y
    return (time.perf_counter() - t0) * 1e6 / n


def build(name, a):
    """(step, grad): a callable running one eager step of the workload, and whether it records
    autograd."""
    torch.manual_seed(0)
    if name == "decode":
        with torch.device("cuda"):
            m = tierpool_models.llama3_8b().to(torch.bfloat16).eval()
        past = tuple((torch.randn(1, 8, a.context, 128, device="cuda", dtype=torch.bfloat16),
                      torch.randn(1, 8, a.context, 128, device="cuda", dtype=torch.bfloat16))
                     for _ in range(32))
        tok = torch.randint(0, 128256, (1, 1), device="cuda", dtype=torch.int64)

        def step():
            with torch.no_grad():
                m(tok, past)
        return step, False
    import torchvision
    inference = name.endswith("_inf")
    base = name[:-len("_inf")] if inference else name
    if base == "transformer12":
        model, x = tierpool_models.transformer_stack(), torch.randn(8, 512, 768)
    else:
        model, x = getattr(torchvision.models, base)(), torch.randn(32, 3, 224, 224)
    model = model.to(device=DEV, dtype=torch.bfloat16)
    x = x.to(device=DEV, dtype=torch.bfloat16)
    if inference:
        model.eval()

        def infer():
            with torch.no_grad():
                model(x)
        return infer, False
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.Adam(params)

    def train():
        for p in params:
            p.grad = None
        out = model(x)
        (out[0] if isinstance(out, (tuple, list)) else out).float().sum().backward()
        opt.step()
    return train, True


def measure(name, a, out):
    """Measures one workload into out["workloads"][name]."""
    t0 = time.time()
    step, grad = build(name, a)
    for _ in range(3):
        step()
    sync()
    eager_ms = median_ms(step, a.repeat)
    ops, wall_ms = tierpool_host_costs.top_level_ops(step, a.profile_steps, sync)
    n = a.profile_steps
    calls = sum(c for c, _ in ops.values()) / n
    op_ms = sum(t for _, t in ops.values()) / n / 1e3
    out["workloads"][name] = {
        "grad": grad, "eager_ms": eager_ms, "profiled_step_ms": wall_ms / n,
        "top_level_ops_per_step": calls, "ops_host_ms_per_step": op_ms,
        "ops": tierpool_host_costs.per_step(ops, n)}
    print("%-14s eager %7.2f ms; profiled %7.2f ms a step: %5.0f top-level ops, %6.2f ms in "
          "them (%.1f us each), built and run in %.0f s" % (
              name, eager_ms, wall_ms / n, calls, op_ms, 1e3 * op_ms / max(calls, 1),
              time.time() - t0), flush=True)
    for k, v in list(out["workloads"][name]["ops"].items())[:8]:
        print("    %-40s %6.1f a step, %6.1f us each" % (
            k[:40], v["calls_per_step"], v["host_us_per_call"]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workloads", default="decode,resnet18_inf,resnet50,vit_b_16,transformer12")
    ap.add_argument("--context", type=int, default=4096, help="decode: the KV cache's positions")
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--profile-steps", type=int, default=3)
    ap.add_argument("--device", default="cuda", help="cpu: try the script where there is no GPU")
    ap.add_argument("--json", help="write the results here")
    a = ap.parse_args()
    global DEV
    DEV = a.device
    out = {"torch": torch.__version__,
           "device": torch.cuda.get_device_name(0) if DEV == "cuda" else "cpu",
           "add_us_no_grad": add_us(False), "add_us_grad": add_us(True), "workloads": {}}
    print("add_ issued back to back: %.1f us without autograd, %.1f us with" % (
        out["add_us_no_grad"], out["add_us_grad"]), flush=True)
    for name in a.workloads.split(","):
        try:
            measure(name, a, out)
        except Exception as e:  # the other workloads still count
            print("%s failed: %r" % (name, e), flush=True)
            out["workloads"][name] = {"error": repr(e)}
        if DEV == "cuda":
            torch.cuda.empty_cache()
        if a.json:  # after each workload: what was measured stays if a later one fails
            with open(a.json, "w") as f:
                json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
