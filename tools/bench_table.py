#!/usr/bin/env python3
"""Joins informerd's Google Benchmark output with a reference run into the shared row format.

    bench_table.py --informerd cpp.json --reference ref.json --reference-name client-go \
        --row "NAME=BM_NAME|REF_NAME[|UNIT]" ... --target 2 --out bench/results/x.json

`--informerd` is Google Benchmark JSON (items_per_second per benchmark; with repetitions the
median aggregate is used). `--reference` is {"rows": [{"name", "unit", "value"}]} as the Go
baselines print it. Rates (unit ending in "/s") compare as informerd / reference; costs (any
other unit) as reference / informerd, so `advantage` is always "times better than the
reference". Prints a table and writes {"rows": [...]} to --out.
"""
import argparse
import json
import statistics
import sys


def load_informerd(path):
    with open(path) as f:
        data = json.load(f)
    values = {}
    for b in data["benchmarks"]:
        name = b.get("run_name", b["name"])
        if b.get("run_type") == "aggregate" and b.get("aggregate_name") != "median":
            continue
        if "items_per_second" not in b:
            continue
        # Without repetitions there is one iteration row; with them, the median aggregate wins.
        if b.get("run_type") == "aggregate" or name not in values:
            values[name] = b["items_per_second"]
    return values


def load_reference(path):
    with open(path) as f:
        data = json.load(f)
    grouped = {}
    for row in data["rows"]:
        grouped.setdefault(row["name"], []).append(row["value"])
    return {k: statistics.median(v) for k, v in grouped.items()}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--informerd", required=True)
    p.add_argument("--reference", required=True)
    p.add_argument("--reference-name", required=True)
    p.add_argument("--row", action="append", required=True, help="NAME=BM_NAME|REF_NAME[|UNIT]")
    p.add_argument("--target", type=float, required=True)
    p.add_argument("--out", required=True)
    args = p.parse_args()

    ours = load_informerd(args.informerd)
    ref = load_reference(args.reference)
    rows = []
    for spec in args.row:
        name, rest = spec.split("=", 1)
        parts = rest.split("|")
        bm, ref_name = parts[0], parts[1]
        unit = parts[2] if len(parts) > 2 else "keys/s"
        if bm not in ours:
            sys.exit(f"bench_table: no informerd result for {bm}")
        if ref_name not in ref:
            sys.exit(f"bench_table: no {args.reference_name} result for {ref_name}")
        a, b = ours[bm], ref[ref_name]
        advantage = a / b if unit.endswith("/s") else b / a
        rows.append({
            "name": name,
            "unit": unit,
            "informerd": round(a, 1),
            "reference": round(b, 1),
            "reference_name": args.reference_name,
            "advantage": round(advantage, 2),
            "target": args.target,
        })
    with open(args.out, "w") as f:
        json.dump({"rows": rows}, f, indent=2)
        f.write("\n")
    width = max(len(r["name"]) for r in rows)
    print(f"{'row':<{width}}  {'unit':>8}  {'informerd':>14}  {args.reference_name:>14}  {'advantage':>9}  {'target':>6}  ok")
    failed = 0
    for r in rows:
        ok = r["advantage"] >= r["target"]
        failed += not ok
        print(f"{r['name']:<{width}}  {r['unit']:>8}  {r['informerd']:>14,.0f}  {r['reference']:>14,.0f}  "
              f"{r['advantage']:>8.2f}x  {r['target']:>5.1f}x  {'yes' if ok else 'NO'}")
    print(f"wrote {args.out}; {len(rows) - failed} of {len(rows)} rows meet the target")


if __name__ == "__main__":
    main()
