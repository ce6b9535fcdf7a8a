#!/usr/bin/env python3
"""PyTorch's side of bench_cuda_train: one training step (forward, cross-entropy, backward, SGD
with momentum 0.9, lr 0.01) of the Fashion-MNIST CNN and MLP at batch 64 on the GPU, timed like
tessera's (CUDA events around each step on the current stream, median of many after warm-up).

    python3 bench/torch_cuda_step.py [--steps N] [--out FILE.json]

Also the step in a training loop that uploads each batch from host memory (`train_loop/<model>/
torch/64` with pageable batches, `torch_pinned` with pinned ones and non_blocking copies; wall
clock per step over 25 steps back to back), beside bench_cuda_train's `train_loop` rows.

Prints one line per row, `train_step/<model>/torch/64  median_us=...  samples/s=...`, and
writes the same as JSON (Google Benchmark's layout: {"benchmarks": [{"name", "median_us",
"samples/s"}]}) so scripts/cuda_report.py reads it beside tessera's. cudnn.benchmark is on
(PyTorch picks its fastest convolution algorithms); TF32 is off, as in tessera's default.
"""
import argparse
import json
import statistics
import sys
import time

import torch
from torch import nn

BATCH = 64


def model_of(kind):
    if kind == "cnn":
        return nn.Sequential(
            nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128),
                         nn.ReLU(), nn.Linear(128, 10))


def time_steps(kind, steps):
    torch.manual_seed(7)
    dev = torch.device("cuda")
    model = model_of(kind).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    images = torch.randn(BATCH, 1, 28, 28, device=dev)
    labels = torch.randint(0, 10, (BATCH,), device=dev)
    loss_fn = nn.CrossEntropyLoss()

    def step():
        loss = loss_fn(model(images), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()

    for _ in range(20):  # warm-up: cuDNN's algorithm search, allocator, lazy initialization
        step()
    torch.cuda.synchronize()
    loss = float(loss_fn(model(images), labels))
    if loss != loss:
        sys.exit(f"torch {kind}: loss is NaN")
    start = torch.cuda.Event(enable_timing=True)
    stop = torch.cuda.Event(enable_timing=True)
    us = []
    for _ in range(steps):
        start.record()
        step()
        stop.record()
        stop.synchronize()
        us.append(start.elapsed_time(stop) * 1e3)
    median = statistics.median(us)
    return {"name": f"train_step/{kind}/torch/{BATCH}", "median_us": median,
            "samples/s": BATCH / (median * 1e-6), "loss": loss}


def time_loop(kind, loops, steps, pinned):
    """The step in a training loop, as bench_cuda_train's train_loop rows: each step uploads its
    batch from host memory (8 batches in turn), `steps` steps back to back per loop, wall clock
    per step. Pageable host batches with a plain .to() (PyTorch then waits for each copy), or
    pinned ones with non_blocking=True (what a DataLoader with pin_memory gives)."""
    torch.manual_seed(7)
    dev = torch.device("cuda")
    model = model_of(kind).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    images = [torch.randn(BATCH, 1, 28, 28) for _ in range(8)]
    labels = [torch.randint(0, 10, (BATCH,)) for _ in range(8)]
    if pinned:
        images = [x.pin_memory() for x in images]
        labels = [y.pin_memory() for y in labels]
    loss_fn = nn.CrossEntropyLoss()

    def step(i):
        x = images[i % 8].to(dev, non_blocking=pinned)
        y = labels[i % 8].to(dev, non_blocking=pinned)
        loss = loss_fn(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()

    for i in range(20):
        step(i)
    torch.cuda.synchronize()
    us = []
    i = 0
    for _ in range(loops):
        t0 = time.perf_counter()
        for _ in range(steps):
            step(i)
            i += 1
        torch.cuda.synchronize()
        us.append((time.perf_counter() - t0) / steps * 1e6)
    median = statistics.median(us)
    variant = "torch_pinned" if pinned else "torch"
    return {"name": f"train_loop/{kind}/{variant}/{BATCH}", "median_us": median,
            "samples/s": BATCH / (median * 1e-6)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--out", help="JSON results")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("torch_cuda_step: no CUDA device visible, nothing to measure")
        return
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    rows = [time_steps(kind, a.steps) for kind in ("cnn", "mlp")]
    rows += [time_loop(kind, 20, 25, pinned) for kind in ("cnn", "mlp") for pinned in (False, True)]
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}")
    for r in rows:
        print(f"{r['name']:32s} median_us={r['median_us']:.1f}  samples/s={r['samples/s']:.0f}")
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"context": {"torch": torch.__version__,
                                   "device": torch.cuda.get_device_name()},
                       "benchmarks": rows}, f, indent=1)


if __name__ == "__main__":
    main()
