#!/usr/bin/env python3
"""Table (and plot) of one scripts/bench_bert.sh run: all-MiniLM-L6-v2 in tessera, in every
precision, next to PyTorch and ONNX Runtime on the same machine.

usage: bert_report.py BENCH_BERT_OUTPUT [PLOT.png] > table.md

BENCH_BERT_OUTPUT is what bench_bert.sh prints (it saves it as build/bench-results/bert.txt).
Each tessera row is compared with ONNX Runtime's int8 when it is int8 (int8w7 too), else with
its fp32. The plot needs matplotlib (bench_bert.sh runs this script with its ONNX Runtime venv, which
has it).
"""
import re
import sys


def parse(text):
    """{name: [sentences/s at 32 x 128, ms at 1 x 16]}"""
    rows = {}
    for line in text.splitlines():
        m = re.match(r"BertForward_(\w+)/(\d+)/(\d+)/real_time_median\s+([0-9.]+) ms", line)
        if m:
            row = rows.setdefault("tessera " + m.group(1), [None, None])
            ms = float(m.group(4))
            if m.group(2) == "32":
                row[0] = 32 / (ms / 1e3)
            else:
                row[1] = ms
            continue
        m = re.match(r"(pytorch|onnxruntime) \S+ (\w+)\s+([0-9.]+) sentences/s\s+([0-9.]+) ms",
                     line)
        if m:
            rows[f"{m.group(1)} {m.group(2)}"] = [float(m.group(3)), float(m.group(4))]
    return rows


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    rows = parse(open(sys.argv[1]).read())
    if not any(k.startswith("tessera") for k in rows):
        sys.exit(f"bert_report.py: no tessera rows in {sys.argv[1]}")
    print("| | sentences/s, 32 x 128 | ms, 1 x 16 | throughput vs ONNX Runtime | latency vs "
          "ONNX Runtime |")
    print("|---|---:|---:|---:|---:|")
    for name, (tput, ms) in rows.items():
        ref = rows.get("onnxruntime int8" if "int8" in name else "onnxruntime fp32")
        vs = f"{tput / ref[0]:.2f}x | {ms / ref[1]:.2f}x" if ref and name.startswith("tessera") \
            else " | "
        print(f"| {name} | {tput:.1f} | {ms:.2f} | {vs} |")
    if len(sys.argv) < 3:
        return
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(no matplotlib: plot skipped)", file=sys.stderr)
        return
    names = list(rows)
    colors = ["tab:blue" if n.startswith("tessera") else "tab:gray" for n in names]
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    a.barh(names, [rows[n][0] for n in names], color=colors)
    a.set_xlabel("sentences/s at batch 32 x 128 (higher is better)")
    b.barh(names, [rows[n][1] for n in names], color=colors)
    b.set_xlabel("ms at batch 1 x 16 (lower is better, log scale)")
    b.set_xscale("log")
    b.set_yticklabels([])
    for ax in (a, b):
        ax.invert_yaxis()
        ax.grid(axis="x", alpha=0.3)
    fig.suptitle("all-MiniLM-L6-v2 inference, 2 threads, one run")
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=110)


if __name__ == "__main__":
    main()
