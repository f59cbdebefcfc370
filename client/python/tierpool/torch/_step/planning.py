"""From a recorded step to a registered plan: the link's speed measured through the server, the
schedule written and planned by the `tierpool` tool, the budget checked against the step's
floor before the planner is asked."""

import json
import os
import shutil
import subprocess
import time

from ... import _errors
from ...client import Tier


def find_tool():
    """The `tierpool` tool: $TIERPOOL_TOOL, else the one on PATH."""
    tool = os.environ.get("TIERPOOL_TOOL") or shutil.which("tierpool")
    if not tool:
        raise _errors.FailedPrecondition(
            "tierpool.torch.offload plans with the `tierpool` tool, which is not on PATH; "
            "install tierpool (scripts/quickstart.sh) or set TIERPOOL_TOOL to its path", 5)
    return tool


def run_tool(tool, *args):
    """Runs the tool; its output, or the error it printed as an exception."""
    r = subprocess.run([tool, *[str(a) for a in args]], capture_output=True, text=True)
    if r.returncode != 0:
        msg = (r.stderr.strip() or r.stdout.strip()).replace("tierpool: ", "")
        raise _errors.FailedPrecondition("`tierpool %s` failed: %s" % (args[0], msg), 5)
    return r.stdout


def measure_links(client, key, nbytes):
    """The server's hbm<-dram and hbm->dram copy rates (GB/s) and one move's fixed cost (us),
    measured with an object of ``nbytes`` (the median of three rounds each). On a host-memory
    hbm these are the mover's memory copies (checked against the checksum as they go); on a GPU,
    its copy engines."""
    data = bytearray(os.urandom(4096)) * (nbytes // 4096)
    ins, outs, small = [], [], []
    try:
        for _ in range(3):
            client.put(key, data, tier="hbm")
            if client.stat(key).tier != Tier.HBM:
                raise _errors.ResourceExhausted(
                    "the server's hbm has no room for a %d MiB test object; it needs room for "
                    "the job's budget" % (nbytes >> 20), 8)
            t0 = time.perf_counter()
            client.promote(key, "dram")  # the only copy: copied down
            t1 = time.perf_counter()
            client.promote(key, "hbm")
            t2 = time.perf_counter()
            outs.append(t1 - t0)
            ins.append(t2 - t1)
            client.delete(key)
            client.put(key, data[:4096])
            t0 = time.perf_counter()
            client.promote(key, "hbm")
            small.append(time.perf_counter() - t0)
            client.delete(key)
    finally:
        try:
            client.delete(key)
        except _errors.NotFound:
            pass
    med = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
    return (len(data) / med(ins) / 1e9, len(data) / med(outs) / 1e9, med(small) * 1e6)


def write_profile(path, h2d_gbps, d2h_gbps, latency_us):
    with open(path, "w") as f:
        json.dump({"base": "h100", "name": "measured-through-tierpoold", "h2d_gbps": h2d_gbps,
                   "d2h_gbps": d2h_gbps, "link_latency_us": latency_us}, f)


def plan(tool, workdir, schedule, hbm_budget, device, recompute=0):
    """Writes the schedule, plans it under ``hbm_budget`` bytes on ``device`` (a profile name or
    file), recomputing activations for at most ``recompute`` of the compute where moving them
    stalls, and returns (schedule .pb bytes, plan .pb bytes, the plan as JSON, what the tool
    printed)."""
    sched_json = os.path.join(workdir, "schedule.json")
    sched_pb = os.path.join(workdir, "schedule.pb")
    plan_pb = os.path.join(workdir, "plan.pb")
    plan_json = os.path.join(workdir, "plan.json")
    with open(sched_json, "w") as f:
        json.dump(schedule, f)
    run_tool(tool, "schedule", "convert", sched_json, "-o", sched_pb)
    more = ["--recompute", repr(float(recompute))] if recompute else []
    out = run_tool(tool, "plan", sched_pb, "--device", device, "--hbm", str(int(hbm_budget)),
                   "-o", plan_pb, "--json", plan_json, *more)
    with open(sched_pb, "rb") as f:
        sched_bytes = f.read()
    with open(plan_pb, "rb") as f:
        plan_bytes = f.read()
    with open(plan_json) as f:
        plan_doc = json.load(f)
    return sched_bytes, plan_bytes, plan_doc, out
