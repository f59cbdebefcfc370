#!/usr/bin/python3
"""Before/after table of `tierpool bench --json` runs taken in one session.
Usage: scripts/bench-compare.py BEFORE.json[,BEFORE2.json...] AFTER.json[,AFTER2.json...]
Each row: the median over the runs of each side, as GB/s or objects/s, its ratio to memcpy, and
p99; the last column is after ÷ before."""
import json
import statistics
import sys


def rows(paths):
    out = {}
    for p in paths.split(","):
        for r in json.load(open(p)):
            if r.get("path") == "reference" or r["op"] == "memcpy":
                continue  # the references (memcpy, older runs' "reference" rows)
            key = (r["size"], r["op"], r["path"], r.get("objects_per_op", 1), r.get("threads", 1))
            out.setdefault(key, []).append(r)
    return out


def med(rs, field):
    return statistics.median(r.get(field, 0) for r in rs)


def main():
    before, after = rows(sys.argv[1]), rows(sys.argv[2])
    print("| size | op | path | before (median) | after (median) | after ÷ before | × memcpy before / after | p99 µs before / after |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for key in sorted(before, key=lambda k: (k[3], k[4], k[0], k[1], k[2])):
        if key not in after:
            continue
        size, op, path, n, threads = key
        b, a = before[key], after[key]
        if n > 1:
            unit, field = "objects/s", "objects_per_s"
            label = f"{n} × {size // 1024} KiB" + (f", {threads} threads" if threads > 1 else "")
        else:
            unit, field = "GB/s", "gbps"
            label = f"{size // 1024} KiB" if size < 1 << 20 else f"{size >> 20} MiB"
        vb, va = med(b, field), med(a, field)
        fmt = (lambda v: f"{v:,.0f}") if n > 1 else (lambda v: f"{v:.2f}")
        rb, ra = med(b, "ratio_to_memcpy"), med(a, "ratio_to_memcpy")
        print(f"| {label} | {op} | {path} | {fmt(vb)} {unit} | {fmt(va)} {unit} | {va / vb if vb else 0:.2f} | "
              f"{rb:.3f} / {ra:.3f} | {med(b, 'p99_us'):.1f} / {med(a, 'p99_us'):.1f} |")


if __name__ == "__main__":
    main()
