#!/usr/bin/env python3
"""Turns a Google Benchmark JSON run of bench_matmul into markdown tables (one per group: rows are
shapes, columns GFLOP/s per implementation at 2 and 1 threads, then tessera/openblas and
tessera/eigen ratios) and a plot of fp32 square GFLOP/s against n at 2 threads, with the measured
FMA peak as a horizontal line.

Usage: matmul_report.py build/bench-results/bench_matmul.json [docs/bench_matmul.png] > table.md

Benchmark names are <group>/<impl>/<shape>/threads:<t>[/real_time]. With repetitions, the
"median" aggregate rows are used when present, else the median of the individual runs. Ratios are
only meaningful within one run: the machine is shared and noisy."""
import json
import re
import statistics
import sys
from collections import defaultdict

GROUP_ORDER = ["peak", "sgemm_square", "sgemm_tn", "sgemm_nt", "dgemm_square", "ml", "lowp"]
GROUP_TITLE = {
    "peak": "Measured FMA peak (independent FMA chains on tessera's SIMD vectors)",
    "sgemm_square": "fp32, square n x n x n",
    "sgemm_tn": "fp32, a^T b (a stored transposed)",
    "sgemm_nt": "fp32, a b^T (b stored transposed)",
    "dgemm_square": "fp64, square n x n x n",
    "ml": "fp32, ML shapes m x k x n (b256_: a batch of 256)",
    "lowp": "low precision, n x n x n (float accumulation; int8: GOP/s, int32 out), fp32 for scale",
}
IMPL_ORDER = ["tessera", "openblas", "eigen"]
THREADS = [2, 1]


def load(path):
    """Returns (context, {group: {shape: {(impl, threads): (GFLOP/s, busy)}}}), busy being the
    calling thread's CPU time over the wall time."""
    data = json.load(open(path))
    medians, runs = {}, defaultdict(list)
    for b in data["benchmarks"]:
        if "GFLOP/s" not in b:
            continue
        name = re.sub(r"(_median|_mean|_stddev|_cv)$", "", b["name"])
        # Drop the segments Google Benchmark appends: /iterations:2, /repeats:3, /real_time, ...
        name = re.sub(r"/(iterations|repeats|min_time|min_warmup_time):[^/]*", "", name)
        name = re.sub(r"/(real_time|manual_time|process_time)$", "", name)
        if b.get("run_type") == "aggregate":
            if b.get("aggregate_name") == "median":
                medians[name] = (b["GFLOP/s"], b["cpu_time"] / b["real_time"])
        elif not b.get("error_occurred"):
            runs[name].append((b["GFLOP/s"], b["cpu_time"] / b["real_time"]))
    values = {n: (statistics.median(g for g, _ in v), statistics.median(c for _, c in v))
              for n, v in runs.items()}
    values.update(medians)
    groups = defaultdict(lambda: defaultdict(dict))
    for name, v in values.items():
        parts = name.split("/")
        if len(parts) != 4 or not parts[3].startswith("threads:"):
            continue
        group, impl, shape, threads = parts
        groups[group][shape][(impl, int(threads.split(":")[1]))] = (v[0] / 1e9, v[1])
    return data.get("context", {}), groups


def shape_key(shape):
    return [int(x) for x in re.findall(r"\d+", shape)] or [shape]


def impls_of(rows):
    found = {impl for cells in rows.values() for impl, _ in cells}
    rest = sorted(found - set(IMPL_ORDER), key=lambda i: (i.startswith("fp32_"), i))
    return [i for i in IMPL_ORDER if i in found] + rest


# The timing thread (every implementation's threads include it) spins or works for the whole
# multiply, so CPU time well under wall time means it was descheduled: another process held a core.
BUSY_MIN = 0.8


def fmt(cell):
    if cell is None:
        return ""
    return f"{cell[0]:.1f}" + ("*" if cell[1] < BUSY_MIN else "")


def gflops(cells, key):
    return cells[key][0] if key in cells else None


def ratio(a, b):
    return f"{a / b:.2f}x" if a is not None and b else ""


def table(group, rows, peak):
    impls = impls_of(rows)
    head = ["shape"] + [f"{i} {t}T" for t in THREADS for i in impls]
    anchors = [a for a in ("openblas", "eigen") if a in impls] if "tessera" in impls else []
    head += [f"tessera/{a} {t}T" for a in anchors for t in THREADS]
    peak_key = "fma_fp64" if group.startswith("dgemm") else "fma_fp32"
    show_peak = "tessera" in impls and group != "peak" and peak.get((peak_key, 2))
    if show_peak:
        head += [f"tessera % of {peak_key} peak {t}T" for t in THREADS]
    out = [f"### {group}: {GROUP_TITLE.get(group, group)}", "",
           "| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    for shape in sorted(rows, key=shape_key):
        cells = rows[shape]
        line = [shape] + [fmt(cells.get((i, t))) for t in THREADS for i in impls]
        line += [ratio(gflops(cells, ("tessera", t)), gflops(cells, (a, t)))
                 for a in anchors for t in THREADS]
        if show_peak:
            line += [f"{100 * gflops(cells, ('tessera', t)) / peak[(peak_key, t)]:.0f}%"
                     if ("tessera", t) in cells and peak.get((peak_key, t)) else ""
                     for t in THREADS]
        out.append("| " + " | ".join(line) + " |")
    return "\n".join(out)


def plot(groups, peak, ctx, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = groups.get("sgemm_square", {})
    fig, ax = plt.subplots(figsize=(8, 5))
    for impl in impls_of(rows):
        pts = sorted((int(s), c[(impl, 2)][0]) for s, c in rows.items() if (impl, 2) in c)
        if pts:
            ax.plot([n for n, _ in pts], [g for _, g in pts], marker="o", label=impl)
    if peak.get(("fma_fp32", 2)):
        p = peak[("fma_fp32", 2)]
        ax.axhline(p, color="black", linestyle="--", linewidth=1)
        ax.text(min((int(s) for s in rows), default=32), p,
                f"measured FMA peak {p:.0f} GFLOP/s", va="bottom", fontsize=8)
    ax.set_xscale("log", base=2)
    ns = sorted(int(s) for s in rows)
    ax.set_xticks(ns, [str(n) for n in ns])
    ax.set_xlabel("n (C = A B, all n x n, fp32)")
    ax.set_ylabel("GFLOP/s (2 threads)")
    top = max([peak.get(("fma_fp32", 2), 0)] + [c[0] for r in rows.values() for c in r.values()])
    ax.set_ylim(0, 1.1 * top)
    ax.set_title(f"fp32 GEMM, {ctx.get('num_cpus', '?')} CPUs at {ctx.get('mhz_per_cpu', '?')} MHz")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    ctx, groups = load(sys.argv[1])
    peak = {k: v[0] for cells in groups.get("peak", {}).values() for k, v in cells.items()}
    # The low-precision table gets the fp32 figures of the same shapes next to it, for scale.
    for shape, cells in groups.get("lowp", {}).items():
        for (impl, t), v in groups.get("sgemm_square", {}).get(shape, {}).items():
            if impl in ("tessera", "openblas"):
                cells[(f"fp32_{impl}", t)] = v
    out = [f"Run: {ctx.get('date', '?')}, {ctx.get('num_cpus', '?')} CPUs, "
           f"{ctx.get('mhz_per_cpu', '?')} MHz, load {ctx.get('load_avg', '?')}. "
           "GFLOP/s (GOP/s for int8), median over repetitions; nT = n threads; * = the timing "
           f"thread ran under {BUSY_MIN:.0%} of the wall time (another process held a core: "
           "not trustworthy).", ""]
    p1, p2 = peak.get(("fma_fp32", 1)), peak.get(("fma_fp32", 2))
    if p1 and p2 and p2 < 1.7 * p1:
        out += [f"**Warning**: the 2-thread FMA peak is only {p2 / p1:.2f}x the 1-thread one: "
                "something else was using a core during this run, so the 2-thread figures "
                "are not trustworthy.", ""]
    for group in GROUP_ORDER + sorted(set(groups) - set(GROUP_ORDER)):
        if group in groups:
            out += [table(group, groups[group], peak), ""]
    print("\n".join(out))
    if len(sys.argv) > 2:
        plot(groups, peak, ctx, sys.argv[2])


if __name__ == "__main__":
    main()
