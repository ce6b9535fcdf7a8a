#!/usr/bin/env python3
"""Turns one Google Benchmark JSON run of bench_elementwise into the markdown table of
docs/benchmarks.md (GB/s, ratio to the plain OpenMP loop and to the best Eigen variant) and a
bar chart. Usage: bench_report.py results.json docs/bench_elementwise.png > table.md
Ratios are only meaningful within one run: the machine is shared and noisy."""
import json
import re
import sys
from collections import defaultdict

def load(path):
    data = json.load(open(path))
    rows = defaultdict(dict)  # (family, args) -> impl -> GB/s
    for b in data["benchmarks"]:
        if b.get("run_type") == "aggregate" and b.get("aggregate_name") != "median":
            continue
        name = re.sub(r"/real_time(_median)?$", "", b["name"])
        head, *args = name.split("/")
        family, impl = head.split("_", 1)
        rows[(family, tuple(args))][impl] = b["GB/s"] / 1e9
    return data.get("context", {}), rows

def describe(family, args):
    n = int(args[0])
    size = "2^25" if n == 1 << 25 else "2^14" if n == 1 << 14 else str(n)
    extra = ""
    if family in ("SumAxis", "MeanAxis"):
        extra = " over rows (axis 0)" if args[1] == "0" else " over cols (axis 1)"
    if family == "Unary":
        extra = " tanh" if args[1] == "1" else " exp"
    return f"{family}{extra}, {size} floats"

def main():
    ctx, rows = load(sys.argv[1])
    out = []
    out.append(f"Run: {ctx.get('date', '?')}, {ctx.get('num_cpus', '?')} CPUs, "
               f"{ctx.get('mhz_per_cpu', '?')} MHz, load {ctx.get('load_avg', '?')}\n")
    out.append("| case | implementation | GB/s | vs plain OpenMP loop | vs best Eigen |")
    out.append("|---|---|---:|---:|---:|")
    chart = []
    for (family, args), impls in sorted(rows.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        # SumAxis/MeanAxis share the plain loop and Eigen matrix anchors.
        anchors = dict(impls)
        if family == "MeanAxis":
            anchors.update(rows.get(("SumAxis", args), {}))
        plain = anchors.get("PlainOpenMP")
        eig = max([v for k, v in anchors.items() if k.startswith("Eigen")], default=None)
        for impl, gbs in sorted(impls.items()):
            r1 = f"{gbs / plain:.2f}x" if plain else ""
            r2 = f"{gbs / eig:.2f}x" if eig else ""
            out.append(f"| {describe(family, args)} | {impl} | {gbs:.1f} | {r1} | {r2} |")
            chart.append((describe(family, args), impl, gbs))
    print("\n".join(out))
    if len(sys.argv) > 2:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        cases = [c for c in dict.fromkeys(c for c, _, _ in chart) if "2^25" in c]
        impls = sorted({i for c, i, _ in chart if c in cases})
        fig, ax = plt.subplots(figsize=(12, 0.55 * len(cases) + 1.5))
        h = 0.8 / len(impls)
        for k, impl in enumerate(impls):
            ys = [i + k * h for i in range(len(cases))]
            vals = [next((g for c, ii, g in chart if c == case and ii == impl), 0) for case in cases]
            ax.barh(ys, vals, height=h, label=impl)
        ax.set_yticks([i + 0.4 - h / 2 for i in range(len(cases))])
        ax.set_yticklabels(cases)
        ax.invert_yaxis()
        ax.set_xlabel("GB/s (2 threads, out of cache: 2^25 floats)")
        ax.legend(fontsize=8, bbox_to_anchor=(1.01, 1), loc="upper left")
        fig.tight_layout()
        fig.savefig(sys.argv[2], dpi=90)

if __name__ == "__main__":
    main()
