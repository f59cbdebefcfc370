#!/usr/bin/python3
"""Fits one device profile to several models' measured schedules at once, and says how well it
predicts each model's whole eager step: fitted on all of them, and fitted on the others (leave
one out). The inputs are what `tierpool schedule calibrate` wrote for each model:
PREFIX-measured.json (--measured) and PREFIX-table.json (--json).

Each op class's efficiencies come from the measured kernels (`schedule fit-profile`); the host's
time per kernel is then the one that brings the worst model's predicted step (kernels as the
profile models them, composed with the host as docs/cost-model.md says) closest to its eager
step, unless --dispatch-us fixes it. A schedule with no measured steps (`--extra
SCHEDULE=EAGER_MS`: an LLM's decode step, whose kernels the profile already models) counts in
that choice and in the table, not in the efficiencies' fit.

  scripts/fit-profile-across.py --tool build/ci/client/tierpool --base h100 \\
      --name h100-eager -o h100-eager.json docs/data/calibration-h100/{resnet50,vit_b_16,...}
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile


def merge(prefixes, out):
    """One schedule holding every model's steps (names prefixed, tensor ids and steps shifted)."""
    merged, steps, tensors = None, [], []
    for p in prefixes:
        with open(p + "-measured.json") as f:
            s = json.load(f)
        merged = merged or s
        tag, off_t, off_s = os.path.basename(p), len(tensors), len(steps)
        for t in s["tensors"]:
            t = dict(t, id=t["id"] + off_t, name=tag + "/" + t["name"])
            if int(t.get("def_step", -1)) >= 0:
                t["def_step"] = int(t["def_step"]) + off_s
            for k in ("use_steps", "update_steps"):
                t[k] = [int(u) + off_s for u in t.get(k, [])]
            tensors.append(t)
        steps += [dict(st, name=tag + "/" + st["name"]) for st in s["steps"]]
    with open(out, "w") as f:
        json.dump(dict(merged, steps=steps, tensors=tensors, repeats=False), f)


def unmeasured(prefix, out):
    """The schedule with the measured times taken off: what the profile alone predicts."""
    with open(prefix + "-measured.json") as f:
        s = json.load(f)
    for st in s["steps"]:
        st.pop("measured", None)
        st.pop("compute_us", None)
    with open(out, "w") as f:
        json.dump(s, f)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("prefixes", nargs="+", help="PREFIX of PREFIX-measured.json and PREFIX-table.json")
    ap.add_argument("--tool", required=True, help="the tierpool binary")
    ap.add_argument("--base", default="h100")
    ap.add_argument("--dispatch-us", type=float, default=None,
                    help="host time per kernel (default: fitted to the eager steps)")
    ap.add_argument("--name", default="calibrated")
    ap.add_argument("-o", "--out", required=True, help="the profile fitted on every model")
    ap.add_argument("--no-leave-one-out", action="store_true", help="skip the fits without each model")
    ap.add_argument("--extra", action="append", default=[], metavar="SCHEDULE=EAGER_MS",
                    help="a schedule without measured steps and its eager iteration in ms")
    ap.add_argument("--max-base-error", type=float, default=None,
                    help="exit 1 if the base profile misses any model's eager step by more (percent)")
    a = ap.parse_args()
    if len(a.prefixes) < 2:
        sys.exit("fit-profile-across: give two models or more")

    def run(*args):
        r = subprocess.run([a.tool, *args], capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit("fit-profile-across: %s: %s" % (" ".join(args[:3]), r.stderr.strip()))
        return r.stdout

    with tempfile.TemporaryDirectory() as tmp:
        plain = {}  # each model's schedule without its measured times, written once

        def predict(prefix, profile):
            if prefix not in plain:
                plain[prefix] = os.path.join(tmp, "plain-%d.json" % len(plain))
                unmeasured(prefix, plain[prefix])
            m = re.search(r"estimated ([0-9.]+) ms per iteration", run("schedule", "show", plain[prefix], "--device", profile))
            return float(m.group(1))

        def with_dispatch(profile, us):
            profile = dict(profile, dispatch_us=us)
            path = os.path.join(tmp, "candidate.json")
            with open(path, "w") as f:
                json.dump(profile, f)
            return path

        def worst(profile, prefixes, us):
            path = with_dispatch(profile, us)
            return max(abs(predict(p, path) / eager[p] - 1) for p in prefixes)

        def fit(prefixes, out):
            measured = [p for p in prefixes if p not in extras]
            merge(measured, os.path.join(tmp, "merged.json"))
            run("schedule", "fit-profile", os.path.join(tmp, "merged.json"), "--device", a.base,
                "--json", os.path.join(tmp, "fit.json"), "--name", a.name)
            with open(os.path.join(tmp, "fit.json")) as f:
                profile = json.load(f)["profile"]
            if a.dispatch_us is not None:
                profile["dispatch_us"] = a.dispatch_us
            else:
                # Each model's error grows with the dispatch time, so the worst of their absolute
                # errors falls, then rises: a ternary search finds its lowest point.
                lo, hi = 0.0, 200.0
                while hi - lo > 0.05:
                    m1, m2 = lo + (hi - lo) / 3, hi - (hi - lo) / 3
                    if worst(profile, prefixes, m1) <= worst(profile, prefixes, m2):
                        hi = m2
                    else:
                        lo = m1
                profile["dispatch_us"] = round((lo + hi) / 2, 1)
            with open(out, "w") as f:
                json.dump(profile, f, indent=2)
            return profile["dispatch_us"]

        eager, extras = {}, []
        for p in a.prefixes:
            with open(p + "-table.json") as f:
                eager[p] = json.load(f)["eager_iteration_ms"]
        for e in a.extra:
            path, _, ms = e.rpartition("=")
            if not path or not os.path.exists(path):
                sys.exit("fit-profile-across: --extra %s: give SCHEDULE=EAGER_MS" % e)
            extras.append(path)
            plain[path] = path  # already without measured steps
            eager[path] = float(ms)
        models = a.prefixes + extras
        dispatch = fit(models, a.out)
        print("fitted on all: %.1f us per kernel on the host" % dispatch)
        print("%-16s %9s %9s %8s %9s %8s %9s %8s %9s" % ("model", "eager ms", a.base, "error", "all",
                                                         "error", "others", "error", "dispatch"))
        missed = []
        for p in models:
            base, every = predict(p, a.base), predict(p, a.out)
            others, loo_dispatch = float("nan"), float("nan")
            if not a.no_leave_one_out:
                loo = os.path.join(tmp, "loo.json")
                loo_dispatch = fit([q for q in models if q != p], loo)
                others = predict(p, loo)
            print("%-16s %9.2f %9.2f %+7.0f%% %9.2f %+7.0f%% %9.2f %+7.0f%% %9.1f" % (
                os.path.basename(p), eager[p], base, 100 * (base / eager[p] - 1), every,
                100 * (every / eager[p] - 1), others, 100 * (others / eager[p] - 1), loo_dispatch))
            if a.max_base_error is not None and abs(base / eager[p] - 1) * 100 > a.max_base_error:
                missed.append(os.path.basename(p))
        if missed:
            sys.exit("fit-profile-across: %s misses %s by more than %g%%" % (
                a.base, ", ".join(missed), a.max_base_error))


if __name__ == "__main__":
    main()
