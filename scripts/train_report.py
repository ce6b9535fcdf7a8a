#!/usr/bin/env python3
"""Compares tessera's and LibTorch's Fashion-MNIST training runs of the same recipe.

usage: train_report.py LOGDIR [PLOT.png]

LOGDIR holds tessera_<model>.log (the output of build/examples/fashion_mnist --model <model>)
and torch_<model>.log (build/bench/fashion_mnist_torch --model <model>) for cnn and/or mlp.
Prints a markdown table (epoch times, accuracy, inference, ratios) and, when matplotlib is
installed and a plot path is given, draws the epoch and inference times side by side.
"""
import pathlib
import re
import sys


def tessera_run(text):
    epochs = [float(t) for t in re.findall(r"^epoch \d+: .*?train ([0-9.]+) s", text, re.M)]
    acc = re.findall(r"test accuracy ([0-9.]+)%", text)
    inf = re.findall(r"inference ([0-9.]+) s", text)
    return epochs, float(acc[-1]) if acc else None, float(inf[-1]) if inf else None


def torch_run(text):
    epochs = [float(t) for t in re.findall(r"^epoch \d+: train_time_s=([0-9.]+)", text, re.M)]
    acc = re.findall(r"^test_accuracy=([0-9.]+)", text, re.M)
    inf = re.findall(r"^inference_s=([0-9.]+)", text, re.M)
    return epochs, 100 * float(acc[-1]) if acc else None, float(inf[-1]) if inf else None


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    logs = pathlib.Path(sys.argv[1])
    rows = {}
    for model in ("cnn", "mlp"):
        t, p = logs / f"tessera_{model}.log", logs / f"torch_{model}.log"
        if t.exists() and p.exists():
            rows[model] = (tessera_run(t.read_text()), torch_run(p.read_text()))
    if not rows:
        sys.exit(f"train_report.py: no tessera_<model>.log / torch_<model>.log pair in {logs}")
    print("| model | epoch | tessera s | LibTorch s | ratio |")
    print("|---|---:|---:|---:|---:|")
    for model, ((te, ta, ti), (pe, pa, pi)) in rows.items():
        for i, (a, b) in enumerate(zip(te, pe), 1):
            print(f"| {model} | {i} | {a:.2f} | {b:.2f} | {a / b:.2f}x |")
        print(f"| {model} | inference (10k) | {ti:.3f} | {pi:.3f} | {ti / pi:.2f}x |")
        print(f"| {model} | test accuracy | {ta:.2f}% | {pa:.2f}% | |")
    if len(sys.argv) < 3:
        return
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(no matplotlib: plot skipped)", file=sys.stderr)
        return
    fig, axes = plt.subplots(1, 2 * len(rows), figsize=(4 * 2 * len(rows), 3.6))
    for j, (model, ((te, _, ti), (pe, _, pi))) in enumerate(rows.items()):
        ax = axes[2 * j]
        x = range(1, len(te) + 1)
        ax.bar([i - 0.2 for i in x], te, 0.4, label="tessera")
        ax.bar([i + 0.2 for i in x], pe[: len(te)], 0.4, label="LibTorch")
        ax.set_title(f"{model}: training time per epoch")
        ax.set_xlabel("epoch")
        ax.set_ylabel("seconds (lower is better)")
        ax.set_xticks(list(x))
        ax.legend()
        ax = axes[2 * j + 1]
        ax.bar(["tessera", "LibTorch"], [ti, pi], color=["C0", "C1"])
        ax.set_title(f"{model}: inference, 10k test images")
        ax.set_ylabel("seconds")
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=110)
    print(f"wrote {sys.argv[2]}", file=sys.stderr)


if __name__ == "__main__":
    main()
