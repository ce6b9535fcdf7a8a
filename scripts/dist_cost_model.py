#!/usr/bin/env python3
"""Alpha-beta cost model of tessera's data-parallel training, fitted and projected.

  scripts/dist_cost_model.py [ALL_REDUCE_OUTPUT] [--step-ms MS --grad-mib MIB] [--backward F]

1. Fit: reads the table bench_all_reduce prints (scripts/bench_dist.sh saves it as
   build/bench-results/all_reduce.txt) and fits t(n) = alpha + beta * n to each column (tessera
   and MPI_Allreduce), by least squares weighted by 1 / t^2 (relative errors, so that the 1 KiB
   and the 256 MiB rows both count). With 2 ranks this is one message each way: alpha is the
   per-call cost, beta the inverse of the bandwidth one rank sees.
2. Project: the time of one step of DataParallel training on P machines, for P = 2, 8, 64, 512,
   over two networks (stated below), with ring and tree all-reduce and three bucket sizes:
     ring:  2 (P - 1) alpha + 2 (P - 1) / P * n * beta
     tree:  2 log2(P) alpha + 2 n beta          (pipelined binary trees, as NCCL's)
   Each bucket's all-reduce starts when its last gradient is ready (gradients appear evenly
   through backward) and the buckets go one after another on the network. tessera's own costs
   are carried over from the fit: its extra time per call (its alpha minus MPI's) is added to
   every bucket, and the network's beta is multiplied by its measured bandwidth factor
   (its beta / MPI's: OpenMPI's nonblocking all-reduce moves data slower than the blocking one).
   Two workloads: the Fashion-MNIST CNN as measured (per rank: 32 images, 1 thread), and
   fine-tuning all-MiniLM-L6-v2 as estimated; --step-ms with --grad-mib adds one of your own.
Needs only python3.
"""
import argparse
import math
import sys

# The networks of the projection (assumptions, not measurements): per-message latency and
# per-link bandwidth one way.
NETWORKS = [
    ("25 GbE, TCP", 30e-6, 25e9 / 8),
    ("100 Gb/s InfiniBand", 3e-6, 100e9 / 8),
]
MACHINES = [2, 8, 64, 512]
BUCKETS_MIB = [0.25, 1, 25]
# (name, forward + backward seconds per step and rank, gradient bytes)
WORKLOADS = [
    ("Fashion-MNIST CNN: 24.0 ms per step of 32 images (measured: bench_data_parallel's local "
     "step, 1 thread), 421642 float32 gradients", 24.0e-3, 421642 * 4),
    ("all-MiniLM-L6-v2 fine-tuning: 32 x 128 tokens, 3 x 92 GFLOP at 100 GFLOP/s = 2.76 s "
     "(estimated), 22713216 float32 gradients", 2.76, 22713216 * 4),
]


def read_table(path):
    """Rows (bytes, tessera seconds, MPI seconds) of bench_all_reduce's output."""
    rows = []
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 4 and parts[0].isdigit():
                rows.append((int(parts[0]), float(parts[1]) * 1e-6, float(parts[3]) * 1e-6))
    if len(rows) < 2:
        sys.exit(f"dist_cost_model: no bench_all_reduce rows in {path}")
    return rows


def fit(points):
    """alpha, beta minimising sum ((alpha + beta n - t) / t)^2."""
    sw = sx = sy = sxx = sxy = 0.0
    for n, t in points:
        w = 1.0 / (t * t)
        sw += w
        sx += w * n
        sy += w * t
        sxx += w * n * n
        sxy += w * n * t
    det = sw * sxx - sx * sx
    beta = (sw * sxy - sx * sy) / det
    alpha = (sy - beta * sx) / sw
    return alpha, beta


def all_reduce_time(kind, p, n, alpha, beta):
    if p == 1:
        return 0.0
    if kind == "ring":
        return 2 * (p - 1) * alpha + 2 * (p - 1) / p * n * beta
    return 2 * math.log2(p) * alpha + 2 * n * beta


def step_time(compute, backward_share, grad_bytes, bucket_bytes, comm):
    """Forward + backward + the all-reduce time not hidden behind backward."""
    backward = compute * backward_share
    buckets = max(1, math.ceil(grad_bytes / bucket_bytes))
    size = grad_bytes / buckets
    done = 0.0  # the network's clock, from the start of backward
    for i in range(1, buckets + 1):
        ready = backward * i / buckets
        done = max(done, ready) + comm(size)
    return compute + max(0.0, done - backward)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("table", nargs="?", default="build/bench-results/all_reduce.txt")
    ap.add_argument("--step-ms", type=float, help="forward + backward per step and rank")
    ap.add_argument("--grad-mib", type=float, help="gradient size of that workload")
    ap.add_argument("--backward", type=float, default=2 / 3,
                    help="share of the step that is backward (default 2/3)")
    a = ap.parse_args()

    rows = read_table(a.table)
    ours = fit([(n, t) for n, t, _ in rows])
    mpi = fit([(n, t) for n, _, t in rows])
    print("Fit of t(n) = alpha + beta n over %d sizes (%d B to %d B), 2 ranks:"
          % (len(rows), rows[0][0], rows[-1][0]))
    for name, (al, be) in (("tessera", ours), ("MPI_Allreduce", mpi)):
        worst = max(abs(al + be * n - t) / t for n, t in
                    [(r[0], r[1] if name == "tessera" else r[2]) for r in rows])
        print("  %-14s alpha %7.1f us  beta %.3f ns/B (%.2f GB/s)  worst misfit %.0f%%"
              % (name, al * 1e6, be * 1e9, 1 / be / 1e9, worst * 100))
    extra = max(0.0, ours[0] - mpi[0])
    slower = max(1.0, ours[1] / mpi[1])
    print("  tessera's own cost: %.1f us per call, bandwidth factor %.2f" % (extra * 1e6, slower))

    workloads = list(WORKLOADS)
    if a.step_ms is not None and a.grad_mib is not None:
        workloads.append(("your workload", a.step_ms * 1e-3, a.grad_mib * 2**20))
    for name, compute, grad in workloads:
        print("\n%s; backward %.0f%% of the step." % (name, a.backward * 100))
        print("Step time and scaling efficiency (compute / step):")
        for net, alpha, bw in NETWORKS:
            beta = slower / bw
            print("  %s (alpha %.0f us, %.1f GB/s):" % (net, alpha * 1e6, bw / 1e9))
            print("    %-5s %-8s" % ("", "bucket") +
                  "".join("%19s" % ("P = %d" % p) for p in MACHINES))
            for kind in ("ring", "tree"):
                for mib in BUCKETS_MIB:
                    cells = []
                    for p in MACHINES:
                        comm = lambda n, p=p: extra + all_reduce_time(kind, p, n, alpha, beta)
                        t = step_time(compute, a.backward, grad, mib * 2**20, comm)
                        cells.append("%9.1f ms %4.0f%%" % (t * 1e3, compute / t * 100))
                    print("    %-5s %4g MiB" % (kind, mib) + "".join("%19s" % c for c in cells))


if __name__ == "__main__":
    main()
