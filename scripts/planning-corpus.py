#!/usr/bin/python3
"""The planner on every classification model of Debian's torchvision: each traced for training
(batch 32, Adam) with `tierpool schedule from-torch` in the given dtypes (or, with
--inference-onnx, exported to ONNX for inference and imported at batch 32), then swept with
`tierpool replay --sweep` under each device profile. Reports, per model, dtype and profile, the
no-offload iteration time and peak, and the smallest budget within the overhead limit (1%): the
peak reduction a plan gets for free. Then the corpus-wide median and worst against the target
(issue #12: under gh200 every training graph at least 30% lower peak, the median at least 40%).

  scripts/planning-corpus.py --tool build/ci/client/tierpool [--models resnet50,vit_b_16]
      [--dtypes bfloat16,float32] [--devices gh200,h100] [--sweep-step 0.05]
      [--sweep-lowest 0.3] [--jobs 2] [--timeout 900] [--work DIR] [--reuse] [--json OUT.json]
      [--split-updates 16M] [--lp-windows 64] [--recompute 0.05] [--inference-onnx]
      [--llm [--llm-batch 4] [--llm-tokens 1024] [--llm-generate 1024:16]]

A sweep's resolution is --sweep-step: "within 1% down to 45%" means 45% passed and 40% did not.
The LP stall bound is skipped unless --lp-windows N (N > 0) asks for it: at several seconds per
budget it takes the corpus from minutes to hours. With it, each sweep also makes the LP-guided
plan where the planned one stalls, and each row gets the smallest budget within 1% with the
better of the two plans, and the better plan's worst stall over the bound (budgets whose bound
is above 0 and whose better plan stalls more than 1% of the iteration; where the bound is 0 the
ratio says nothing). A model that cannot
be traced or planned within --timeout is listed with its error and counted as a failure; the
exit status is 1 when any failed or any planned replay broke an invariant. --reuse keeps the
schedules and sweeps already in --work (a long run resumed) instead of making them again.
--split-updates SIZE plans each schedule with its large optimizer updates as slices of at most
SIZE (`tierpool schedule split-updates`: they stream through hbm slice by slice).
--recompute SHARE lets the planner recompute activations instead of moving them where its plan
stalls, adding at most SHARE of the compute (`tierpool replay --recompute`); each row then also
says how many it recomputes at its smallest budget within 1%. Every row has the lower peak
within 5% beside the one within 1%.
--llm plans the LLM corpus instead: decoders written as current LLM code writes them
(tierpool_models.py: grouped-query attention with repeat_interleave, rotary embeddings from
arange, RMSNorm, SwiGLU, a triu causal mask, tied embeddings) of 100M, 300M, 0.8B and 2.9B
parameters, each trained (batch x tokens, Adam) and decoded (`--generate --decode-only`).
--inference-onnx plans the inference corpus instead: each model exported by
scripts/onnx-corpus.py (opset 17, weights as graph inputs, a dynamic batch axis), imported with
`tierpool schedule from-onnx --batch 32` (fp32, repeating: an inference server runs the graph
again and again), and swept the same way; --dtypes is then float32. Models PyTorch cannot export
are listed as such and not counted as failures (the importer never saw them).
"""
import argparse
import concurrent.futures
import json
import os
import statistics
import subprocess
import sys
import time


# The LLM corpus (compiler_hooks/torch/tierpool_models.py, CORPUS_LLMS): each trained, and
# decoded ("-decode": the decode loop of a generation after a prompt, its KV cache growing).
LLMS = ("llm_100m", "llm_300m", "llm_800m", "llm_3b")


def models(selected, llm=False):
    if selected:
        return selected.split(",")
    if llm:
        return [m + kind for m in LLMS for kind in ("", "-decode")]
    import torchvision
    return sorted(torchvision.models.list_models(module=torchvision.models))


def run(cmd, timeout):
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return False, "timed out after %d s" % timeout
    if p.returncode != 0:
        lines = (p.stderr or p.stdout).strip().splitlines()
        return False, lines[-1] if lines else "exit %d" % p.returncode
    return True, ""


def make_schedule(a, name, dtype, pb):
    """Writes name's schedule to pb: (ok, error, export_failed)."""
    size = 299 if name.startswith("inception") else 224
    if a.llm and name.endswith("-decode"):
        prompt, new_tokens = a.llm_generate.split(":")
        ok, err = run([a.tool, "schedule", "from-torch", "--model",
                       "tierpool_models:" + name[:-len("-decode")], "--generate",
                       "%s:%s" % (prompt, new_tokens), "--decode-only", "--batch",
                       str(a.llm_batch), "--dtype", dtype, "-o", pb], a.timeout)
        return ok, "trace: " + err, False
    if a.llm:
        ok, err = run([a.tool, "schedule", "from-torch", "--model", "tierpool_models:" + name,
                       "--input", "%dx%d:int64" % (a.llm_batch, a.llm_tokens), "--dtype", dtype,
                       "--optimizer", "adam", "-o", pb], a.timeout)
        return ok, "trace: " + err, False
    if not a.inference_onnx:
        ok, err = run([a.tool, "schedule", "from-torch", "--model", "torchvision.models:" + name,
                       "--input", "32x3x%dx%d" % (size, size), "--dtype", dtype,
                       "--optimizer", "adam", "-o", pb], a.timeout)
        return ok, "trace: " + err, False
    onnx_path = pb[:-len(".pb")] + ".onnx"
    exporter = os.path.join(os.path.dirname(os.path.abspath(__file__)), "onnx-corpus.py")
    ok, err = run(["/usr/bin/python3", exporter, "--tool", a.tool, "--export-to", onnx_path,
                   "--models", name, "--opsets", "17", "--variants", "no-weights+dynamic"],
                  a.timeout)
    if not ok:
        return False, "export: " + err, True
    ok, err = run([a.tool, "schedule", "from-onnx", onnx_path, "--batch", "32", "-o", pb],
                  a.timeout)
    os.remove(onnx_path)
    return ok, "import: " + err, False


def one(a, name, dtype):
    """Traces name in dtype and sweeps it under every device: a list of result rows."""
    kind = "-inf" if a.inference_onnx else ""
    pb = os.path.join(a.work, "%s-%s%s.pb" % (name, dtype, kind))
    t0 = time.time()
    rows = []
    if not (a.reuse and os.path.exists(pb)):
        ok, err, export_failed = make_schedule(a, name, dtype, pb)
        if not ok:
            return [{"model": name, "dtype": dtype, "device": d, "error": err,
                     "export_failed": export_failed} for d in a.devices]
    for device in a.devices:
        split = ["--split-updates", a.split_updates] if a.split_updates else []
        recompute = ["--recompute", a.recompute] if a.recompute else []
        out = os.path.join(a.work, "sw-%s-%s%s-%s%s%s%s.json" % (
            name, dtype, kind, device, "-split" + a.split_updates if split else "",
            "-lp%d" % a.lp_windows if a.lp_windows else "",
            "-recompute" + a.recompute if recompute else ""))
        if not (a.reuse and os.path.exists(out)):
            ok, err = run([a.tool, "replay", pb, "--device", device, "--sweep",
                           "--sweep-step", str(a.sweep_step), "--sweep-lowest",
                           str(a.sweep_lowest), "--lp-windows", str(a.lp_windows), "--json",
                           out] + split + recompute,
                          a.timeout)
            if not ok:
                rows.append({"model": name, "dtype": dtype, "device": device,
                             "error": "sweep: " + err})
                continue
        with open(out) as f:
            sw = json.load(f)
        best = sw.get("smallest_budget_within_overhead") or {}
        planned = [r["planned"] for r in sw["rows"] if "planned" in r]
        # Within 5%: the smallest budget whose plan and every larger budget's keep within it.
        within5 = 1.0
        for r in sw["rows"]:
            if "planned" not in r or r["planned"]["time_us"] > 1.05 * sw["none"]["time_us"]:
                break
            within5 = r["fraction"]
        within5_peak = min([r["planned"]["peak_hbm_bytes"] for r in sw["rows"]
                            if "planned" in r and r["fraction"] >= within5 - 1e-9] +
                           [sw["none"]["peak_hbm_bytes"]])
        rows.append({
            "model": name, "dtype": dtype, "device": device,
            "split_updates": a.split_updates,
            "iteration_ms": sw["none"]["time_us"] / 1e3,
            "peak_gib": sw["none"]["peak_hbm_bytes"] / 2**30,
            "fraction": best.get("fraction", 1.0),
            "peak_reduction": best.get("peak_reduction", 0.0),
            "peak_reduction_within_5": 1.0 - within5_peak / max(sw["none"]["peak_hbm_bytes"], 1),
            "recomputed_anywhere": sum(r["planned"].get("recomputed", 0) for r in sw["rows"]
                                       if "planned" in r),
            "recomputed_at_smallest": next((r["planned"].get("recomputed", 0)
                                            for r in sw["rows"]
                                            if abs(r["fraction"] - best.get("fraction", 1.0))
                                            < 1e-9 and "planned" in r), 0),
            "breaches": sum(p["missing_at_use"] + p["budget_violations"] + p["bad_actions"]
                            for p in planned),
            "planning_ms_max": sw.get("planning_ms_max", 0.0),
            # The budget no policy keeps below, as a share of the peak (what the busiest step
            # touches at once): 1 - this is the most any plan lowers the peak.
            "step_floor": (sw.get("step_floor") or {}).get("fraction"),
        })
        if a.lp_windows:
            rows[-1].update(lp_columns(sw))
    for r in rows:
        r["seconds"] = round(time.time() - t0, 1)
    return rows


def lp_columns(sw):
    """What a sweep with the LP bound adds to a corpus row (see the docstring)."""
    guided = sw.get("smallest_budget_within_overhead_guided") or sw.get(
        "smallest_budget_within_overhead") or {}
    iteration = sw["none"]["time_us"]
    worst_planned = worst_better = 0.0
    within, counted = 0, 0
    for r in sw["rows"]:
        bound = (r.get("lp_bound") or {}).get("stall_us", 0.0)
        if "planned" not in r:
            continue
        planned = r["planned"]["stall_us"]
        better = min(planned, r["guided"]["stall_us"]) if "guided" in r else planned
        if bound <= 0 or better <= 0.01 * iteration:
            continue
        counted += 1
        within += better <= 1.25 * bound
        worst_planned = max(worst_planned, planned / bound)
        worst_better = max(worst_better, better / bound)
    # Budgets are steps of the peak (0.7000000000000001 is 70%): rounded, so that 30% counts.
    fraction = round(guided.get("fraction", 1.0), 6)
    return {"fraction_better": fraction,
            "peak_reduction_better": round(guided.get("peak_reduction", 1.0 - fraction), 6),
            "worst_planned_over_bound": worst_planned, "worst_better_over_bound": worst_better,
            "budgets_over_bound": counted, "budgets_within_1_25": within}


def graphs(rows, device, dtype):
    """The rows of one profile and dtype that PyTorch could export, and those that planned."""
    sel = [r for r in rows if r["device"] == device and r["dtype"] == dtype and
           not r.get("export_failed")]
    return sel, [r for r in sel if "error" not in r]


def at_least(xs, share):
    return sum(1 for x in xs if x >= share)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tool", required=True)
    ap.add_argument("--models", default="")
    ap.add_argument("--dtypes", default="bfloat16,float32")
    ap.add_argument("--devices", default="gh200,h100")
    ap.add_argument("--sweep-step", type=float, default=0.05)
    ap.add_argument("--sweep-lowest", type=float, default=0.3)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=int, default=900)
    ap.add_argument("--work", default="planning-corpus")
    ap.add_argument("--reuse", action="store_true")
    ap.add_argument("--json", default="")
    ap.add_argument("--lp-windows", type=int, default=0,
                    help="solve the LP bound with this many windows and plan with its guide")
    ap.add_argument("--split-updates", default="",
                    help="slice optimizer updates above this size (e.g. 16M) before planning")
    ap.add_argument("--recompute", default="",
                    help="let the planner recompute activations, adding at most this share of "
                         "the compute (e.g. 0.05)")
    ap.add_argument("--expect-recompute", action="store_true",
                    help="with --recompute: fail unless some plan of every graph recomputes (a "
                         "check for graphs known to gain from it)")
    ap.add_argument("--llm", action="store_true",
                    help="the LLM corpus (tierpool_models: llm_100m to llm_3b), each trained "
                         "and decoded, instead of torchvision's")
    ap.add_argument("--llm-batch", type=int, default=4)
    ap.add_argument("--llm-tokens", type=int, default=1024, help="training sequence length")
    ap.add_argument("--llm-generate", default="1024:16",
                    help="decode: PROMPT:NEW_TOKENS (the decode loop after the prompt)")
    ap.add_argument("--inference-onnx", action="store_true",
                    help="plan ONNX inference exports at batch 32 instead of training traces")
    a = ap.parse_args()
    if a.inference_onnx:
        a.dtypes = "float32"
    a.devices = a.devices.split(",")
    os.makedirs(a.work, exist_ok=True)
    if a.llm:
        a.work = a.work if a.work != "planning-corpus" else "planning-corpus-llm"
        os.makedirs(a.work, exist_ok=True)
    jobs = [(m, d) for m in models(a.models, a.llm) for d in a.dtypes.split(",")]
    rows = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=a.jobs) as pool:
        for result in pool.map(lambda j: one(a, *j), jobs):
            for r in result:
                print(json.dumps(r), file=sys.stderr, flush=True)
            rows.extend(result)
    rows.sort(key=lambda r: (r["device"], r["dtype"], r["model"]))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    def floor(r):
        return "-" if r.get("step_floor") is None else "%.1f%%" % (100 * r["step_floor"])

    print("| model | dtype | profile | iteration ms | no-offload peak GiB | smallest budget "
          "within 1% (lower peak) | no policy below |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        if "error" in r:
            print("| %s | %s | %s | - | - | %s | - |" % (r["model"], r["dtype"], r["device"],
                                                       r["error"]))
            continue
        print("| %s | %s | %s | %.2f | %.2f | %.0f%% (%.1f%%) | %s |" % (
            r["model"], r["dtype"], r["device"], r["iteration_ms"], r["peak_gib"],
            100 * r["fraction"], 100 * r["peak_reduction"], floor(r)))
    print()
    not_exported = sorted({r["model"] for r in rows if r.get("export_failed")})
    if not_exported:
        print("PyTorch could not export (not counted): " + ", ".join(not_exported))
        print()
    print("| profile | dtype | graphs | failed | median lower peak | worst | at least 30% | "
          "30% out of reach (no policy below 70%) | breaches | median lower peak within 5% |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    failed_any = False
    for device in a.devices:
        for dtype in a.dtypes.split(","):
            sel, good = graphs(rows, device, dtype)
            failed_any |= len(good) < len(sel) or any(r["breaches"] for r in good)
            red = sorted(r["peak_reduction"] for r in good)
            if not red:
                continue
            worst = min(good, key=lambda r: r["peak_reduction"])
            floors = [r["step_floor"] for r in good if r.get("step_floor") is not None]
            print("| %s | %s | %d | %d | %.1f%% | %.1f%% (%s) | %d | %s | %d | %.1f%% |" % (
                device, dtype, len(good), len(sel) - len(good),
                100 * statistics.median(red), 100 * worst["peak_reduction"], worst["model"],
                at_least(red, 0.3),
                "%d of %d" % (sum(1 for f in floors if f > 0.7), len(floors)) if floors else "-",
                sum(r["breaches"] for r in good),
                100 * statistics.median(r["peak_reduction_within_5"] for r in good)))
    if a.recompute:
        planned = [r for r in rows if "error" not in r]
        never = [r["model"] for r in planned if not r.get("recomputed_anywhere")]
        print()
        print("graphs with plans that recompute: %d of %d%s" % (
            len(planned) - len(never), len(planned),
            "" if not never else " (none in: %s)" % ", ".join(sorted(set(never)))))
        failed_any |= a.expect_recompute and bool(never)
    if a.lp_windows:
        print()
        print("| profile | dtype | graphs | median lower peak within 1%: planned / better plan | "
              "at least 30% lower: planned / better | better plan ÷ bound: median of each "
              "graph's worst / worst | budgets within 1.25x of the bound |")
        print("| --- | --- | --- | --- | --- | --- | --- |")
        for device in a.devices:
            for dtype in a.dtypes.split(","):
                good = graphs(rows, device, dtype)[1]
                if not good:
                    continue
                red = [r["peak_reduction"] for r in good]
                better = [r["peak_reduction_better"] for r in good]
                ratios = [r["worst_better_over_bound"] for r in good
                          if r["budgets_over_bound"]]
                worst = max(good, key=lambda r: r["worst_better_over_bound"])
                print("| %s | %s | %d | %.1f%% / %.1f%% | %d / %d | %s | %d of %d |" % (
                    device, dtype, len(good), 100 * statistics.median(red),
                    100 * statistics.median(better), at_least(red, 0.3), at_least(better, 0.3),
                    "%.2f / %.2f (%s)" % (statistics.median(ratios),
                                          worst["worst_better_over_bound"], worst["model"])
                    if ratios else "-",
                    sum(r["budgets_within_1_25"] for r in good),
                    sum(r["budgets_over_bound"] for r in good)))
    return 1 if failed_any else 0


if __name__ == "__main__":
    sys.exit(main())
