#!/usr/bin/python3
"""The cost model against published throughput (docs/cost-model.md).

For each row of docs/data/published-throughput.json: trace the model with the PyTorch hook
(cached in --work), estimate one iteration on the row's built-in profile (`tierpool-schedule
replay --policy none`), and print predicted beside published samples/s with the error.

  scripts/cost-model-check.py --schedule-tool build/ci/client/tierpool-schedule [--work DIR]
      [--profile-override NAME=FILE.json] [--json OUT.json]
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def trace(row, work):
    name = "%s-%s-b%d-%s.json" % (row["model"], row["mode"], row["batch"], row["trace_dtype"])
    path = os.path.join(work, name)
    if not os.path.exists(path):
        cmd = ["/usr/bin/python3", os.path.join(ROOT, "compiler_hooks/torch/tierpool_torch_schedule.py"),
               "--model", "torchvision.models:" + row["model"], "--input", "%dx3x224x224" % row["batch"],
               "--dtype", row["trace_dtype"], "--optimizer", row["optimizer"], "--out", path]
        if row["mode"] == "inference":
            cmd.append("--inference")
        subprocess.run(cmd, check=True)
    return path


def iteration_ms(tool, schedule, profile, work):
    out = os.path.join(work, "replay.json")
    subprocess.run([tool, "replay", schedule, "--device", profile, "--policy", "none", "--json", out],
                   check=True, stdout=subprocess.DEVNULL)
    with open(out) as f:
        return json.load(f)["time_us"] / 1000


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--schedule-tool", required=True, help="the tierpool-schedule binary")
    ap.add_argument("--table", default=os.path.join(ROOT, "docs/data/published-throughput.json"))
    ap.add_argument("--work", default="/tmp/tierpool-cost-model-check", help="traced schedules")
    ap.add_argument("--profile-override", action="append", default=[],
                    help="NAME=FILE.json: use this profile file where a row names NAME")
    ap.add_argument("--json", help="write the rows with predictions here")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    overrides = dict(o.split("=", 1) for o in a.profile_override)
    rows = json.load(open(a.table))["rows"]
    print("| model | mode | hardware (profile) | precision | batch | published/s | predicted/s | error |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    worst = 0.0
    for row in rows:
        ms = iteration_ms(a.schedule_tool, trace(row, a.work), overrides.get(row["profile"], row["profile"]), a.work)
        pred = row["batch"] * 1000.0 / ms
        err = pred / row["published"] - 1
        worst = max(worst, abs(err))
        row.update(predicted=round(pred, 1), iteration_ms=round(ms, 3), error=round(err, 4))
        print("| %s | %s | %s (`%s`) | %s | %d | %.0f | %.0f | %+.0f%% %s%s |" % (
            row["model"], row["mode"], row["hardware"], row["profile"], row["precision"], row["batch"],
            row["published"], pred, 100 * err, "optimistic" if err > 0 else "pessimistic",
            " (fitted)" if row.get("fitted") else ""))
    print("\nlargest error: %.1f%%" % (100 * worst))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
