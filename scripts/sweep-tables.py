#!/usr/bin/python3
"""Markdown tables from `tierpool replay --sweep --json` files, as docs/benchmarks.md shows them.

usage: scripts/sweep-tables.py SWEEP.json [SWEEP.json ...]        one table per file
       scripts/sweep-tables.py --summary SWEEP.json [...]          one line per file
"""
import json
import sys


def gib(b):
    if b >= 1 << 30:
        return f"{b / (1 << 30):.2f} GiB"
    return f"{b / (1 << 20):.0f} MiB"


def rows(d):
    base = d["none"]["time_us"]
    for r in d["rows"]:
        p, q = r.get("planned"), r["reactive"]
        yield r, p, q, base


def lp_ms(r):
    """The LP bound in ms, "-" where the sweep did not solve it."""
    lp = r.get("lp_bound")
    if lp is None:
        return "-"
    if not lp["feasible"]:
        return "infeasible"
    return f"{lp['stall_us'] / 1000:.3f}" + ("" if lp["proven"] else "?")


def best_bound_us(r, q):
    lp = r.get("lp_bound")
    lp_us = lp["stall_us"] if lp and lp["feasible"] else 0.0
    return max(q["stall_lower_bound_us"], lp_us)


def stall_ratio(p, q):
    if p is None or q["stall_us"] <= 0:
        return None
    return p["stall_us"] / q["stall_us"]


def has_guided(d):
    return any("guided" in r for r in d["rows"])


def guided_ms(r):
    """The LP-guided plan's stall in ms, "-" where the sweep made none (no stall to remove)."""
    g = r.get("guided")
    return "-" if g is None else f"{g['stall_us'] / 1000:.3f}"


def table(d):
    base = d["none"]["time_us"]
    guided = has_guided(d)
    out = [f"**{d['device']}**: no-offload peak {gib(d['none']['peak_hbm_bytes'])}, "
           f"iteration {base / 1000:.2f} ms.", "",
           "| budget | planned peak | planned overhead | planned stall ms | reactive-lru peak "
           "| reactive-lru overhead | reactive-lru stall ms | "
           + ("LP-guided stall ms | " if guided else "")
           + "stall lower bound ms | LP bound ms |",
           "| --- " * (10 if guided else 9) + "|"]
    for r, p, q, _ in rows(d):
        if p is None:
            planned = "infeasible | - | -"
        else:
            planned = (f"{gib(p['peak_hbm_bytes'])} | {100 * (p['time_us'] / base - 1):+.2f}% | "
                       f"{p['stall_us'] / 1000:.3f}")
        out.append(f"| {100 * r['fraction']:.1f}% | {planned} | {gib(q['peak_hbm_bytes'])} | "
                   f"{100 * (q['time_us'] / base - 1):+.2f}% | {q['stall_us'] / 1000:.3f} | "
                   + (f"{guided_ms(r)} | " if guided else "")
                   + f"{q['stall_lower_bound_us'] / 1000:.3f} | {lp_ms(r)} |")
    out += ["", summary(d) + f" Slowest plan: {d['planning_ms_max']:.0f} ms"
            + (f" (LP-guided: {d['guided_planning_ms_max']:.0f} ms, the LP's solve apart)"
               if guided else "") + ".", ""]
    return "\n".join(out)


def summary(d):
    s = d.get("smallest_budget_within_overhead")
    within = (f"{100 * s['fraction']:.1f}% of the peak ({100 * s['peak_reduction']:.1f}% lower "
              "peak)") if s else "none"
    ratios = [x for x in (stall_ratio(p, q) for _, p, q, _ in rows(d)) if x is not None]
    over = unreachable = 0
    gap = None  # planned stall over the best bound, where the bound is above 0
    for r, p, q, _ in rows(d):
        if p is not None and p["stall_us"] > 0.5 * q["stall_us"] + 1e-9:
            over += 1
            if 0.5 * q["stall_us"] < best_bound_us(r, q):
                unreachable += 1
        if p is not None and best_bound_us(r, q) > 0:
            ratio = p["stall_us"] / best_bound_us(r, q)
            gap = ratio if gap is None else max(gap, ratio)
    rng = f"{min(ratios):.2f}–{max(ratios):.2f}" if ratios else "-"
    text = (f"Smallest budget within {100 * d['max_overhead']:.0f}% overhead: {within}. "
            f"Planned stall ÷ reactive-lru stall: {rng}; above one half at {over} of "
            f"{len(d['rows'])} budgets, at {unreachable} of which half of reactive-lru's stall "
            "is below the lower bound."
            + (f" Planned stall ÷ best lower bound: at most {gap:.2f}." if gap else ""))
    if has_guided(d):
        text += " " + guided_summary(d)
    return text


def guided_summary(d):
    """How the better of the plain and the LP-guided plan does, per budget."""
    better = made = 0
    gap = None
    within = d.get("smallest_budget_within_overhead_guided")  # the sweep's own answer
    for r, p, q, _ in rows(d):
        if p is None:
            continue
        best = p
        g = r.get("guided")
        if g is not None:
            made += 1
            if g["stall_us"] < p["stall_us"]:
                better += 1
                best = g
        if best_bound_us(r, q) > 0:
            ratio = best["stall_us"] / best_bound_us(r, q)
            gap = ratio if gap is None else max(gap, ratio)
    text = f"LP-guided plan stalls less at {better} of {made} budgets where it was made"
    if within is not None:
        text += (f"; with it, the smallest budget within {100 * d['max_overhead']:.0f}% is "
                 f"{100 * within['fraction']:.1f}% of the peak")
    if gap is not None:
        text += f"; the better plan's stall ÷ best lower bound: at most {gap:.2f}"
    return text + "."


def main(argv):
    if argv and argv[0] == "--summary":
        for f in argv[1:]:
            d = json.load(open(f))
            print(f"- {d['schedule']} on {d['device']}: {summary(d)}")
        return 0
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    for f in argv:
        print(table(json.load(open(f))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
