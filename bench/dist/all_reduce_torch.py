"""all_reduce of float32 tensors, 1 KiB to 256 MiB, with torch.distributed over gloo: the
anchor for bench_all_reduce (same sizes, same median-of-reps timing, bus bandwidth as NCCL's
tests define it). Usage: python3 all_reduce_torch.py [ranks]   (Debian's python3-torch)."""
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def run(rank, world):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    if rank == 0:
        print(f"torch.distributed gloo all_reduce(sum) of float32 over {world} ranks")
        print(f"{'bytes':>10} {'gloo us':>12} {'bus GB/s':>9}")
    size = 1024
    while size <= 256 << 20:
        t = torch.ones(size // 4, dtype=torch.float32)
        reps = max(5, min(200, (256 << 20) // size))
        times = []
        for i in range(reps + 2):
            dist.barrier()
            start = time.perf_counter()
            dist.all_reduce(t)
            elapsed = time.perf_counter() - start
            if i >= 2:
                times.append(elapsed)
        slowest = torch.tensor(times, dtype=torch.float64)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        median = slowest.sort().values[len(times) // 2].item()
        bus = 2.0 * (world - 1) / world * size / 1e9
        if rank == 0:
            print(f"{size:>10} {median * 1e6:>12.1f} {bus / median:>9.2f}")
        size *= 4
    dist.destroy_process_group()


if __name__ == "__main__":
    world = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    mp.spawn(run, args=(world,), nprocs=world)
