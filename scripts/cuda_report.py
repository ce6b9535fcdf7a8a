#!/usr/bin/env python3
"""Turns one GPU run of the CUDA benchmarks into the markdown tables of docs/benchmarks.md
("CUDA") and checks the CUDA issue's acceptance ratios.

    cuda_report.py RESULTS_DIR [PLOT.png] > table.md

RESULTS_DIR holds what scripts/gpu_check.sh wrote: bench_cuda, bench_cuda_conv and
bench_cuda_train rows (Google Benchmark JSON, each program's as PROGRAM.json or in parts
PROGRAM.<step>.json) and torch_cuda_step.json (bench/torch_cuda_step.py). Any of them may be
missing; its tables are then left out. Rows are paired by name: every
benchmark is <family>/<variant>/<impl>/<case> (GEMM: gemm_<type>/<impl>/<shape>), and the ratio
is the anchor's median time over tessera's (above 1: tessera faster). Ratios are only
meaningful within one run."""
import glob
import json
import os
import re
import sys
from collections import defaultdict

# The acceptance targets of the CUDA issue: (table, variant filter, cases, minimum ratio).
GEMM_TARGETS = {"fp32": 0.9, "bf16": 0.75, "fp16": 0.75, "tf32": 0.7, "int8": 0.7}
CONV_TARGET = 0.7  # forward, ResNet shapes, vs cuDNN
STREAM_TARGET = 0.9  # map / sum vs the copy ceiling
TRAIN_TARGET = 2.0  # tessera's CNN step at most 0.5x PyTorch's time


def load(d, stem):
    """name -> benchmark row (median_us and counters) from STEM.json and STEM.<part>.json in d
    (gpu_check.sh writes a program's rows in parts when its steps filter them; a later part's row
    replaces an earlier one of the same name); None when there is no such file."""
    paths = sorted(glob.glob(os.path.join(glob.escape(d), stem + ".*.json")))
    whole = os.path.join(d, stem + ".json")
    if os.path.exists(whole):
        paths.insert(0, whole)
    if not paths:
        return None
    rows = {}
    for path in paths:
        for b in json.load(open(path)).get("benchmarks", []):
            # Google Benchmark appends /iterations:N and /manual_time to the registered name.
            name = re.sub(r"(/iterations:\d+)?(/manual_time)?$", "", b["name"])
            rows[name] = b
    return rows


def median(row):
    if row is None or row.get("error_occurred"):
        return None
    return row.get("median_us")


def fmt(x, spec=".1f"):
    return "" if x is None else format(x, spec)


def gemm_table(rows, out, verdicts):
    pairs = defaultdict(dict)  # (type, shape) -> impl -> row
    for name, r in rows.items():
        m = re.match(r"gemm_(\w+)/(tessera_staged|tessera_mma|tessera_wmma|tessera_tn|"
                     r"tessera_whole_k|tessera_long_tiles|tessera_cp_async|tessera_narrow|"
                     r"tessera_linear_order|tessera|cublas)"
                     r"/(\S+)$", name)
        if m:
            pairs[(m.group(1), m.group(3))][m.group(2)] = r
    # tessera_mma: the mma.sync kernel where wgmma runs by default (built for sm_90a);
    # tessera_wmma: the WMMA pipeline where mma.sync runs by default (tf32, fp16, bf16);
    # tessera_staged: the register-staged tensor-core kernel (pipelines off); tessera_tn: B given
    # k-contiguous (int8 and tf32 on wgmma: no pack; tf32 on mma.sync: ldmatrix rather than
    # 32-bit loads for B's fragments); tessera_whole_k: k never split; tessera_cp_async: the
    # wgmma kernel fed by cp.async where tessera rows feed it by TMA; tessera_narrow: TMA with
    # 128 x 128 tiles only; tessera_linear_order: TMA with tiles in linear order;
    # tessera_long_tiles: fp32 of at most 64 rows on the SIMT kernel's 128-row tiles; each when run.
    out.append("| GEMM | m x k x n | tessera TFLOP/s | cuBLAS TFLOP/s | tessera / cuBLAS | rel_err "
               "| mma.sync TFLOP/s | WMMA pipeline TFLOP/s | register-staged TFLOP/s "
               "| B k-contiguous TFLOP/s | k whole TFLOP/s | wgmma cp.async feed TFLOP/s "
               "| TMA 128 x 128 only TFLOP/s | TMA linear order TFLOP/s | SIMT 128-row tiles TFLOP/s |")
    out.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for (typ, shape), impl in sorted(pairs.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        t, c = impl.get("tessera"), impl.get("cublas")
        tm, cm = median(t), median(c)
        ratio = cm / tm if tm and cm else None
        err = t.get("rel_err") if t else None
        note = f" ({t.get('error_message')})" if t and t.get("error_occurred") else ""
        out.append(f"| {typ} | {shape} | {fmt(t and t.get('TFLOP/s'))}{note} | "
                   f"{fmt(c and c.get('TFLOP/s'))} | {fmt(ratio, '.2f')} | {fmt(err, '.1e')} | "
                   f"{fmt(impl.get('tessera_mma') and impl['tessera_mma'].get('TFLOP/s'))} | "
                   f"{fmt(impl.get('tessera_wmma') and impl['tessera_wmma'].get('TFLOP/s'))} | "
                   f"{fmt(impl.get('tessera_staged') and impl['tessera_staged'].get('TFLOP/s'))} | "
                   f"{fmt(impl.get('tessera_tn') and impl['tessera_tn'].get('TFLOP/s'))} | "
                   f"{fmt(impl.get('tessera_whole_k') and impl['tessera_whole_k'].get('TFLOP/s'))} | "
                   f"{fmt(impl.get('tessera_cp_async') and impl['tessera_cp_async'].get('TFLOP/s'))} | "
                   f"{fmt(impl.get('tessera_narrow') and impl['tessera_narrow'].get('TFLOP/s'))} | "
                   f"{fmt(impl.get('tessera_linear_order') and impl['tessera_linear_order'].get('TFLOP/s'))} | "
                   f"{fmt(impl.get('tessera_long_tiles') and impl['tessera_long_tiles'].get('TFLOP/s'))} |")
        dims = [int(d) for d in shape.split("x")]
        if typ in GEMM_TARGETS and min(dims) >= 4096:
            verdicts.append((f"GEMM {typ} {shape} >= {GEMM_TARGETS[typ]}x cuBLAS", ratio,
                             GEMM_TARGETS[typ]))


def conv_table(rows, out, verdicts):
    pairs = defaultdict(dict)  # (pass, math, shape) -> impl -> row
    for name, r in rows.items():
        m = re.match(r"conv_(\w+)/(\w+)/(tessera_planar|tessera_whole_k|tessera_split32|"
                     r"tessera_lowered|tessera_winograd|tessera|cudnn)/(\w+)$", name)
        if m:
            pairs[(m.group(1), m.group(2), m.group(4))][m.group(3)] = r
    # tessera_planar (tf32): the planar implicit GEMM on the register-staged kernel, where tessera
    # runs the channels-last one on the pipelined kernels (when the channels allow);
    # tessera_split32 (fp32 weight gradients of lenet1 and lenet2): k in 32 parts, the split's
    # choice there before its cap went;
    # tessera_lowered (weight gradients; strided input gradients): implicit GEMM off, the input
    # (or W^T dy) lowered in device memory;
    # tessera_winograd (fp32 3x3 stride-1 forward, input and weight gradients): under
    # set_float32_conv_algorithm(winograd); cuDNN's algorithm: the label of its row (what
    # cudnnFind* chose).
    out.append("| pass | math | shape | tessera TFLOP/s | cuDNN TFLOP/s | tessera / cuDNN | rel_err "
               "| planar TFLOP/s | k whole TFLOP/s | 32 parts TFLOP/s | lowered TFLOP/s "
               "| Winograd TFLOP/s | Winograd / cuDNN | cuDNN algorithm |")
    out.append("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for (p, math, shape), impl in sorted(pairs.items()):
        t, c, pl = impl.get("tessera"), impl.get("cudnn"), impl.get("tessera_planar")
        wk, lw = impl.get("tessera_whole_k"), impl.get("tessera_lowered")
        s32 = impl.get("tessera_split32")
        wg = impl.get("tessera_winograd")
        tm, cm, wm = median(t), median(c), median(wg)
        ratio = cm / tm if tm and cm else None
        wratio = cm / wm if wm and cm else None
        out.append(f"| {p} | {math} | {shape} | {fmt(t and t.get('TFLOP/s'), '.2f')} | "
                   f"{fmt(c and c.get('TFLOP/s'), '.2f')} | {fmt(ratio, '.2f')} | "
                   f"{fmt(t and t.get('rel_err'), '.1e')} | "
                   f"{fmt(pl and median(pl) and pl.get('TFLOP/s'), '.2f')} | "
                   f"{fmt(wk and median(wk) and wk.get('TFLOP/s'), '.2f')} | "
                   f"{fmt(s32 and median(s32) and s32.get('TFLOP/s'), '.2f')} | "
                   f"{fmt(lw and median(lw) and lw.get('TFLOP/s'), '.2f')} | "
                   f"{fmt(wm and wg.get('TFLOP/s'), '.2f')} | {fmt(wratio, '.2f')} | "
                   f"{(c and c.get('label')) or ''} |")
        if p == "fwd" and shape.startswith("resnet"):
            verdicts.append((f"conv fwd {math} {shape} >= {CONV_TARGET}x cuDNN", ratio,
                             CONV_TARGET))
            if wg is not None:  # the same layer under set_float32_conv_algorithm(winograd)
                verdicts.append((f"conv fwd {math} {shape} (Winograd) >= {CONV_TARGET}x cuDNN",
                                 wratio, CONV_TARGET))


def stream_table(rows, out, verdicts):
    copy = next((r for n, r in rows.items() if n.startswith("ceiling/copy_d2d")), None)
    if copy is None:
        return
    out.append("| op | GB/s | vs device-to-device copy |")
    out.append("|---|---:|---:|")
    out.append(f"| cudaMemcpy D2D (ceiling) | {fmt(copy.get('GB/s'), '.0f')} | 1.00 |")
    for name, r in sorted(rows.items()):
        if name.startswith("stream/"):
            ratio = r.get("GB/s") / copy.get("GB/s") if median(r) and median(copy) else None
            out.append(f"| {name} | {fmt(r.get('GB/s'), '.0f')} | {fmt(ratio, '.2f')} |")
            verdicts.append((f"{name} >= {STREAM_TARGET}x copy bandwidth", ratio, STREAM_TARGET))


def merged(tessera, torch):
    """tessera's and PyTorch's rows in one name -> row dict."""
    rows = dict(tessera or {})
    rows.update(torch or {})
    return rows


def train_table(tessera, torch, out, verdicts):
    rows = merged(tessera, torch)
    out.append("| training step (batch 64) | tessera ms | PyTorch ms | PyTorch / tessera "
               "| tessera launches | tessera waits |")
    out.append("|---|---:|---:|---:|---:|---:|")
    for model in ("cnn", "mlp"):
        row = rows.get(f"train_step/{model}/tessera/64")
        t = median(row)
        p = median(rows.get(f"train_step/{model}/torch/64"))
        ratio = p / t if t and p else None
        launches = row.get("launches/step") if row else None
        waits = row.get("waits/step") if row else None
        out.append(f"| {model} | {fmt(t and t / 1e3, '.3f')} | {fmt(p and p / 1e3, '.3f')} | "
                   f"{fmt(ratio, '.2f')} | {fmt(launches, '.0f')} | {fmt(waits, '.0f')} |")
        if model == "cnn":
            verdicts.append(("CNN step <= 0.5x PyTorch's time", ratio, TRAIN_TARGET))


def loop_table(tessera, torch, out):
    """The step in a training loop that uploads its batch from host memory (no target: it shows
    what the host side and the uploads cost once host and device overlap)."""
    rows = merged(tessera, torch)
    if not any(n.startswith("train_loop/") for n in rows):
        return
    out.append("| training loop step (batch 64, uploaded each step) | tessera ms | PyTorch ms "
               "(pageable) | PyTorch ms (pinned, non_blocking) | faster PyTorch / tessera "
               "| tessera waits/step |")
    out.append("|---|---:|---:|---:|---:|---:|")
    for model in ("cnn", "mlp"):
        row = rows.get(f"train_loop/{model}/tessera/64")
        t = median(row)
        p = median(rows.get(f"train_loop/{model}/torch/64"))
        pp = median(rows.get(f"train_loop/{model}/torch_pinned/64"))
        best = min((x for x in (p, pp) if x), default=None)
        ratio = best / t if t and best else None
        waits = row.get("waits/step") if row else None
        out.append(f"| {model} | {fmt(t and t / 1e3, '.3f')} | {fmt(p and p / 1e3, '.3f')} | "
                   f"{fmt(pp and pp / 1e3, '.3f')} | {fmt(ratio, '.2f')} | {fmt(waits, '.2f')} |")


def plot(rows, path):
    try:
        import matplotlib
    except ImportError:
        print("cuda_report: matplotlib not found, no plot", file=sys.stderr)
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    bars = []
    for name, r in rows.items():
        m = re.match(r"gemm_(\w+)/tessera/(\d+x\d+x\d+)$", name)
        if m and m.group(2).split("x")[0] in ("4096", "8192"):
            ref = rows.get(name.replace("/tessera/", "/cublas/"))
            if median(r) and median(ref):
                bars.append((f"{m.group(1)} {m.group(2)}", median(ref) / median(r)))
    if not bars:
        return
    fig, ax = plt.subplots(figsize=(9, 0.4 * len(bars) + 1.2))
    ax.barh([b[0] for b in bars], [b[1] for b in bars])
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_xlabel("tessera / cuBLAS throughput")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    d = sys.argv[1]
    gemm = load(d, "bench_cuda")
    conv = load(d, "bench_cuda_conv")
    train = load(d, "bench_cuda_train")
    torch = load(d, "torch_cuda_step")
    out, verdicts = [], []
    if gemm:
        stream_table(gemm, out, verdicts)
        out.append("")
        gemm_table(gemm, out, verdicts)
        out.append("")
    if conv:
        conv_table(conv, out, verdicts)
        out.append("")
    if train or torch:
        train_table(train, torch, out, verdicts)
        out.append("")
        loop_table(train, torch, out)
        out.append("")
    out.append("| acceptance target | measured | met |")
    out.append("|---|---:|---|")
    for what, ratio, target in verdicts:
        met = "not measured" if ratio is None else ("yes" if ratio >= target else "no")
        out.append(f"| {what} | {fmt(ratio, '.2f')} | {met} |")
    print("\n".join(out))
    if len(sys.argv) > 2 and gemm:
        plot(gemm, sys.argv[2])


if __name__ == "__main__":
    main()
