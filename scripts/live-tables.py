#!/usr/bin/python3
"""Markdown tables from scripts/live-figures.sh output: live against simulated, per schedule,
profile and budget. Usage: scripts/live-tables.py OUTDIR"""
import glob
import json
import os
import sys


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def ms(us):
    return f"{us / 1000:.1f}"


def main():
    out = sys.argv[1]
    names = sorted({os.path.basename(p).split("-")[0] for p in glob.glob(f"{out}/*.json")})
    misses = []
    costs = []
    errors = {}  # policy -> live ÷ simulated - 1 of each run
    for name in names:
        for device in ("h100", "gh200"):
            none = load(f"{out}/{name}-{device}-none.json")
            if none is None:
                continue
            errors.setdefault("none", []).append(none["error"]["time"])
            print(f"\n**{name} on {device}** (calibrated links {none['calibration']['h2d_gbps']:.2f} GB/s, "
                  f"compute x{none['calibration']['compute_stretch']:.0f}); none: live "
                  f"{ms(none['live']['time_us'])} ms, simulated {ms(none['simulated']['time_us'])} ms "
                  f"({100 * none['error']['time']:+.1f}%), overrun {ms(none['checks']['overrun_us'])} ms\n")
            print("| budget | policy | simulated ms (stall) | live ms (stall) | error | live peak / budget | h2d MiB sim / live | executor hits / late / misses | overrun ms | wrong bytes |")
            print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
            for budget in ("90", "75", "60"):
                runs = {}
                for policy in ("reactive-lru", "planned"):
                    r = load(f"{out}/{name}-{device}-{budget}-{policy}.json")
                    if r is None:
                        txt = f"{out}/{name}-{device}-{budget}-{policy}.txt"
                        lines = open(txt).read().strip().splitlines() if os.path.exists(txt) else []
                        why = lines[-1].replace("tierpool replay --live: ", "") if lines else "not run"
                        print(f"| {budget}% | {policy} | - | - | - | - | - | - | - | {why} |")
                        continue
                    runs[policy] = r
                    errors.setdefault(policy, []).append(r["error"]["time"])
                    live, sim = r["live"], r["simulated"]
                    ex = r["executor"]
                    hlm = f"{ex['hits']} / {ex['late']} / {ex['misses']}" if policy == "planned" else "-"
                    print(f"| {budget}% | {policy} | {ms(sim['time_us'])} ({ms(sim['stall_us'])}) | "
                          f"{ms(live['time_us'])} ({ms(live['stall_us'])}) | {100 * r['error']['time']:+.1f}% | "
                          f"{live['peak_hbm_bytes'] / max(1, live['budget_bytes']):.3f} | "
                          f"{sim['h2d_bytes'] / 2**20:.0f} / {live['h2d_bytes'] / 2**20:.0f} | {hlm} | "
                          f"{ms(r['checks']['overrun_us'])} | {r['checks']['wrong_bytes']} |")
                if len(runs) == 2:
                    floor = none["live"]["stall_us"]  # one get round trip per step, all in hbm
                    lp, lr = runs["planned"]["live"]["stall_us"], runs["reactive-lru"]["live"]["stall_us"]
                    sp, sr = runs["planned"]["simulated"]["stall_us"], runs["reactive-lru"]["simulated"]["stall_us"]
                    ratio_live = lp / lr if lr > 0 else 0
                    net_p, net_r = max(0.0, lp - floor), max(0.0, lr - floor)
                    ratio_net = net_p / net_r if net_r > 0 else 0
                    ratio_sim = sp / sr if sr > 0 else 0
                    print(f"| {budget}% | planned ÷ reactive-lru stall | {ratio_sim:.2f} | {ratio_live:.2f} "
                          f"({ratio_net:.2f} net of the none run's {ms(floor)} ms) | | | | | | |")
                    if ratio_sim <= 0.5 and ratio_net > 0.5:
                        misses.append(f"{name} {device} {budget}%: live {ratio_net:.2f} net "
                                      f"(simulated {ratio_sim:.2f})")
                for policy, r in runs.items():
                    sim_cost = r["simulated"]["time_us"] - none["simulated"]["time_us"]
                    live_cost = r["live"]["time_us"] - none["live"]["time_us"]
                    costs.append((name, device, budget, policy, sim_cost, live_cost))
    if costs:
        print("\nOffload cost (the policy's time less the none run's), simulated against live:\n")
        print("| schedule | profile | budget | policy | simulated ms | live ms | live ÷ simulated |")
        print("| --- | --- | --- | --- | --- | --- | --- |")
        for name, device, budget, policy, sim_cost, live_cost in costs:
            ratio = f"{live_cost / sim_cost:.2f}" if sim_cost > 1000 else "-"
            print(f"| {name} | {device} | {budget}% | {policy} | {ms(sim_cost)} | {ms(live_cost)} | {ratio} |")
    if errors:
        print("\nLive total time against the simulation's prediction, by policy:\n")
        for policy, e in sorted(errors.items()):
            e = sorted(e)
            within = sum(1 for x in e if abs(x) <= 0.10)
            print(f"- {policy}: within 10% in {within} of {len(e)} runs; error {100 * e[0]:+.1f}% to "
                  f"{100 * e[-1]:+.1f}%, median {100 * e[len(e) // 2]:+.1f}%")
    if misses:
        print("\nWhere the simulation says planned stall ≤ ½ reactive-lru's and live does not: " + "; ".join(misses))


if __name__ == "__main__":
    main()
