#!/usr/bin/python3
"""LLM decode figures for docs/benchmarks.md: a LLaMA-style decoder (Llama 3 8B's shape, bf16)
decoding with its KV cache, planned by tierpool on a device profile.

  scripts/llm-decode-figures.py --tool build/ci/client/tierpool --out /tmp/llm-figures

1. For each context (4K, 32K, 128K) and device: `tierpool replay --sweep` of the decode-only
   schedule (the prompt's cache exists; NEW decodes of one token): the lowest budget within 1%
   overhead, planned beside reactive-lru and the stall lower bound.
   The sweep solves the LP stall bound at each budget and makes the LP-guided plan beside the
   plain one (`docs/schedules.md`); the table shows the lowest budget within 1% for each, and
   the highest budget from which the bound itself is over 1% (no policy gets there).
2. At a fixed hbm budget (the no-offload peak at --base-context): the longest context whose
   planned replay (`--lp-guided` with --lp-guided) stays within 1% of its own no-offload step
   time, against --base-context without offload.
"""
import argparse
import json
import os
import subprocess
import sys


def run(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        sys.exit("failed: %s\n%s" % (" ".join(cmd), p.stderr))
    return p.stdout


def schedule(a, context):
    path = os.path.join(a.out, "%s-%d-%d.pb" % (a.model.split(":")[-1], context, a.new_tokens))
    if not os.path.exists(path):
        run([a.tool, "schedule", "from-torch", "--model", a.model, "--dtype", "bfloat16",
             "--generate", "%d:%d" % (context, a.new_tokens), "--decode-only",
             "--batch", str(a.batch), "-o", path])
    return path


def replay(a, path, device, hbm, policy):
    out = os.path.join(a.out, "replay.json")
    cmd = [a.tool, "replay", path, "--device", device, "--policy", policy, "--json", out]
    if hbm:
        cmd += ["--hbm", str(hbm)]
    if policy == "planned" and a.lp_guided:
        # At the 64 boundaries the recorded figures were made with (the tool's guide defaults
        # to 8 since 2026-11-28).
        cmd += ["--lp-guided", "--lp-windows", "64"]
    run(cmd)
    with open(out) as f:
        return json.load(f)


def cache_and_weights(a, path):
    """The prompt's KV cache (the tensors that arrive in the first step) and the weights."""
    out = os.path.join(a.out, "schedule.json")
    run([a.tool, "schedule", "convert", path, "--json", out])
    with open(out) as f:
        s = json.load(f)
    kv = sum(int(t["size_bytes"]) for t in s["tensors"]
             if t.get("kind") == "KV_CACHE" and t["name"].startswith("prompt/"))
    weights = sum(int(t["size_bytes"]) for t in s["tensors"] if t.get("kind") == "WEIGHT")
    return kv, weights


def gib(b):
    return "%.2f GiB" % (b / (1 << 30))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tool", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--model", default="tierpool_models:llama3_8b")
    ap.add_argument("--devices", default="gh200,h100")
    ap.add_argument("--contexts", default="4096,32768,131072")
    ap.add_argument("--new-tokens", type=int, default=4)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--base-context", type=int, default=32768)
    ap.add_argument("--context-step", type=int, default=8192)
    ap.add_argument("--max-context", type=int, default=131072)
    ap.add_argument("--lp-guided", action="store_true",
                    help="the context search plans with --lp-guided (seconds per plan)")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    devices = a.devices.split(",")

    print("| device | context | KV cache | weights | no-offload peak | step ms | lowest budget within 1% "
          "| lower peak | with the LP-guided plan | lower peak | bound >1% from "
          "| planned stall at 60% ms | LP-guided at 60% ms | bound at 60% ms | slowest plan s |")
    print("| --- " * 15 + "|")
    for context in [int(c) for c in a.contexts.split(",")]:
        path = schedule(a, context)
        for device in devices:
            sweep_json = os.path.join(a.out, "sweep-%s-%d.json" % (device, context))
            run([a.tool, "replay", path, "--device", device, "--sweep", "--json", sweep_json])
            with open(sweep_json) as f:
                d = json.load(f)
            none = d["none"]
            base = none["time_us"]
            # The sweep's own answers (the guided one: the better plan at each budget).
            best = d.get("smallest_budget_within_overhead", {}).get("budget_bytes")
            best_guided = d.get("smallest_budget_within_overhead_guided", {}).get("budget_bytes")
            bound_from = at60 = None
            for r in d["rows"]:
                lp = r.get("lp_bound", {})
                bound = max(r["reactive"]["stall_lower_bound_us"],
                            lp.get("stall_us", 0) if lp.get("feasible", True) else float("inf"))
                if bound > 0.01 * base and (bound_from is None or r["fraction"] > bound_from):
                    bound_from = r["fraction"]
                if abs(r["fraction"] - 0.6) < 1e-6:
                    at60 = r
            kv, weights = cache_and_weights(a, path)
            peak = none["peak_hbm_bytes"]

            def ms(row, key, field="stall_us"):
                return "%.3f" % (row[key][field] / 1000) if row and row.get(key) else "-"

            lp60 = (at60 or {}).get("lp_bound")
            bound60 = max(at60["reactive"]["stall_lower_bound_us"],
                          lp60["stall_us"] if lp60 else 0) if at60 else None
            print("| %s | %dK | %s | %s | %s | %.2f | %s | %.1f%% | %s | %.1f%% | %s | %s | %s | %s "
                  "| %.1f |" % (
                      device, context // 1024, gib(kv), gib(weights), gib(peak),
                      base / 1000 / a.new_tokens, gib(best) if best else "-",
                      100 * (1 - best / peak) if best else 0,
                      gib(best_guided) if best_guided else "-",
                      100 * (1 - best_guided / peak) if best_guided else 0,
                      "%.0f%%" % (100 * bound_from) if bound_from else "-",
                      ms(at60, "planned"), ms(at60, "guided"),
                      "%.3f" % (bound60 / 1000) if bound60 is not None else "-",
                      max(d["planning_ms_max"], d.get("guided_planning_ms_max", 0)) / 1000))
            sys.stdout.flush()

    print()
    print("| device | budget (no-offload peak at %dK) | longest context within 1%% | longer by |"
          % (a.base_context // 1024))
    print("| --- | --- | --- | --- |")
    for device in devices:
        base_path = schedule(a, a.base_context)
        budget = replay(a, base_path, device, None, "none")["peak_hbm_bytes"]
        longest = a.base_context
        context = a.base_context + a.context_step
        while context <= a.max_context:
            path = schedule(a, context)
            none = replay(a, path, device, None, "none")
            planned = replay(a, path, device, budget, "planned")
            ok = planned["time_us"] <= none["time_us"] * 1.01 and planned["peak_hbm_bytes"] <= budget
            sys.stderr.write("%s %dK: %.3f ms vs %.3f ms, peak %s of %s: %s\n" % (
                device, context // 1024, planned["time_us"] / 1000, none["time_us"] / 1000,
                gib(planned["peak_hbm_bytes"]), gib(budget), "ok" if ok else "over"))
            if not ok:
                break
            longest = context
            context += a.context_step
        print("| %s | %s | %dK | %+.0f%% |" % (device, gib(budget), longest // 1024,
                                              100 * (longest / a.base_context - 1)))


if __name__ == "__main__":
    main()
