#!/usr/bin/env python3
"""Turns a Google Benchmark JSON run of bench_conv into markdown tables (one per pass and thread
count: rows are shapes, columns GFLOP/s of tessera, tessera under conv_algorithm::winograd (3x3
stride-1 layers), oneDNN with its NCHW reorders (dnnl) and oneDNN on its own layouts
(dnnl_blocked), then the tessera/dnnl, tessera/dnnl_blocked and tessera_winograd/dnnl_blocked ratios)
and a bar plot of the GFLOP/s per shape at the largest thread count, forward and forward +
backward side by side.

Usage: conv_report.py build/bench-results/bench_conv.json [docs/bench_conv.png] > table.md

Benchmark names are <pass>/<impl>/<shape>/threads:<t>[/min_time:..][/real_time]. With
repetitions, the "median" aggregate rows are used when present, else the median of the individual
runs. A benchmark stopped by its correctness check shows as ERROR, with its message below the
table. Ratios are only meaningful within one run: the machine is shared and noisy."""
import json
import re
import statistics
import sys
from collections import defaultdict

PASS_ORDER = ["fwd", "fwd_bwd"]
PASS_TITLE = {
    "fwd": "forward (with bias)",
    "fwd_bwd": "forward + backward (input gradient, weight gradient, bias gradient; lenet1: no "
               "input gradient)",
}
IMPL_ORDER = ["tessera", "tessera_winograd", "dnnl", "dnnl_blocked"]
ANCHORS = ["dnnl", "dnnl_blocked"]


def load(path):
    """Returns (context, {(pass, threads): {shape: {impl: (GFLOP/s, busy)}}}, shape order,
    errors), busy being the calling thread's CPU time over the wall time and errors
    {(pass, impl, shape, threads): message}."""
    data = json.load(open(path))
    medians, runs, errors, order = {}, defaultdict(list), {}, []
    for b in data["benchmarks"]:
        name = re.sub(r"(_median|_mean|_stddev|_cv)$", "", b["name"])
        # Drop the segments Google Benchmark appends: /iterations:2, /min_time:0.500, /real_time.
        name = re.sub(r"/(iterations|repeats|min_time|min_warmup_time):[^/]*", "", name)
        name = re.sub(r"/(real_time|manual_time|process_time)$", "", name)
        parts = name.split("/")
        if len(parts) != 4 or not parts[3].startswith("threads:"):
            continue
        if parts[2] not in order:
            order.append(parts[2])
        if b.get("error_occurred"):
            errors[name] = b.get("error_message", "error")
        elif "GFLOP/s" not in b:
            continue
        elif b.get("run_type") == "aggregate":
            if b.get("aggregate_name") == "median":
                medians[name] = (b["GFLOP/s"], b["cpu_time"] / b["real_time"])
        else:
            runs[name].append((b["GFLOP/s"], b["cpu_time"] / b["real_time"]))
    values = {n: (statistics.median(g for g, _ in v), statistics.median(c for _, c in v))
              for n, v in runs.items()}
    values.update(medians)
    tables = defaultdict(lambda: defaultdict(dict))
    for name, v in values.items():
        ps, impl, shape, threads = name.split("/")
        tables[(ps, int(threads.split(":")[1]))][shape][impl] = (v[0] / 1e9, v[1])
    for name in errors:
        ps, impl, shape, threads = name.split("/")
        tables[(ps, int(threads.split(":")[1]))][shape].setdefault(impl, None)
    return data.get("context", {}), tables, order, errors


# The timing thread (every implementation's threads include it) works for the whole pass, so CPU
# time well under wall time means it was descheduled: another process held a core.
BUSY_MIN = 0.8


def fmt(cell, present):
    if not present:
        return ""
    if cell is None:
        return "ERROR"
    return f"{cell[0]:.1f}" + ("*" if cell[1] < BUSY_MIN else "")


def ratio(a, b):
    return f"{a[0] / b[0]:.2f}x" if a and b and b[0] else ""


def table(ps, threads, rows, order):
    found = {impl for cells in rows.values() for impl in cells}
    impls = [i for i in IMPL_ORDER if i in found] + sorted(found - set(IMPL_ORDER))
    anchors = [a for a in ANCHORS if a in impls] if "tessera" in impls else []
    # Winograd (conv_algorithm::winograd, the 3x3 stride-1 layers only) against the best anchor.
    wino = ["dnnl_blocked"] if "tessera_winograd" in impls and "dnnl_blocked" in impls else []
    head = (["shape"] + [f"{i} GFLOP/s" for i in impls] + [f"tessera/{a}" for a in anchors] +
            [f"tessera_winograd/{a}" for a in wino])
    out = [f"### {ps}, {threads} thread{'s' if threads > 1 else ''}: {PASS_TITLE.get(ps, ps)}",
           "", "| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    for shape in sorted(rows, key=lambda s: order.index(s) if s in order else len(order)):
        cells = rows[shape]
        line = [shape] + [fmt(cells.get(i), i in cells) for i in impls]
        line += [ratio(cells.get("tessera"), cells.get(a)) for a in anchors]
        line += [ratio(cells.get("tessera_winograd"), cells.get(a)) for a in wino]
        out.append("| " + " | ".join(line) + " |")
    return "\n".join(out)


def plot(tables, order, ctx, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    threads = max(t for _, t in tables)
    passes = [p for p in PASS_ORDER if (p, threads) in tables]
    fig, axes = plt.subplots(len(passes), 1, figsize=(10, 3.5 * len(passes)), squeeze=False)
    for ax, ps in zip(axes[:, 0], passes):
        rows = tables[(ps, threads)]
        shapes = [s for s in order if s in rows]
        impls = [i for i in IMPL_ORDER if any(i in rows[s] for s in shapes)]
        width = 0.8 / max(len(impls), 1)
        for j, impl in enumerate(impls):
            xs = [k + (j - (len(impls) - 1) / 2) * width for k in range(len(shapes))]
            ys = [rows[s][impl][0] if rows[s].get(impl) else 0 for s in shapes]
            ax.bar(xs, ys, width, label=impl)
        ax.set_xticks(range(len(shapes)), shapes)
        ax.set_ylabel(f"GFLOP/s ({threads} threads)")
        ax.set_title(f"conv2d fp32 NCHW, {PASS_TITLE.get(ps, ps)}", fontsize=10)
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"{ctx.get('num_cpus', '?')} CPUs at {ctx.get('mhz_per_cpu', '?')} MHz",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    ctx, tables, order, errors = load(sys.argv[1])
    out = [f"Run: {ctx.get('date', '?')}, {ctx.get('num_cpus', '?')} CPUs, "
           f"{ctx.get('mhz_per_cpu', '?')} MHz, load {ctx.get('load_avg', '?')}, oneDNN "
           f"{ctx.get('dnnl_algorithm', '?')}. GFLOP/s = 2*N*K*(C/groups)*R*S*Ho*Wo per pass "
           "(x3 forward + backward, x2 without the input gradient), median over repetitions; "
           "dnnl: NCHW tensors in and out (reorders timed), dnnl_blocked: oneDNN's own layouts "
           f"(no reorder); * = the timing thread ran under {BUSY_MIN:.0%} of the wall time "
           "(another process held a core: not trustworthy).", ""]
    for key in sorted(tables, key=lambda k: (PASS_ORDER.index(k[0]) if k[0] in PASS_ORDER
                                             else len(PASS_ORDER), -k[1], k[0])):
        out += [table(key[0], key[1], tables[key], order), ""]
    if errors:
        out += ["Correctness failures (the benchmark was not timed):", ""]
        out += [f"- `{name}`: {msg}" for name, msg in sorted(errors.items())]
        out.append("")
    print("\n".join(out))
    if len(sys.argv) > 2 and tables:
        plot(tables, order, ctx, sys.argv[2])


if __name__ == "__main__":
    main()
