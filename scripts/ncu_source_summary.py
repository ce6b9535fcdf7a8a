#!/usr/bin/env python3
"""Summarises Nsight Compute's per-instruction page of one kernel (the CSV of
`ncu -i REPORT --page source --csv --print-source sass`): where the warps' stall samples fell.

    ncu_source_summary.py SOURCE.csv [TOP]

Prints the kernel's size in instructions, the samples before, inside and after its hot loop
(the span of the instructions executed at least half as often as the most executed one) with
the share waiting for instruction fetch ("no instruction"), then the TOP (default 25)
instructions by samples with their main stall reasons. gpu_check.sh's profile step runs it on
every profiled kernel; the whole CSV (megabytes) stays on the GPU machine.
"""
import csv
import sys

REASONS = ("stall_no_inst", "stall_wait", "stall_long_sb", "stall_short_sb", "stall_math",
           "stall_barrier", "stall_branch_resolving", "stall_dispatch", "stall_mio",
           "stall_lg", "stall_selected", "stall_not_selected", "stall_sleep")


def number(text):
    try:
        return int(float(text.replace(",", "")))
    except ValueError:
        return 0


def main():
    path = sys.argv[1]
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 25
    rows = list(csv.reader(open(path, newline="")))
    heads = [i for i, r in enumerate(rows) if r and r[0] == "Address"]
    if not heads:
        print(f"{path}: no per-instruction table")
        return 1
    head = rows[heads[0]]
    col = {name: i for i, name in enumerate(head)}
    data = [r for r in rows[heads[0] + 1:] if len(r) == len(head)]
    get = lambda r, name: number(r[col[name]]) if name in col else 0
    samples = [get(r, "# Samples") for r in data]
    executed = [get(r, "Instructions Executed") for r in data]
    total = sum(samples) or 1
    hot = [i for i, e in enumerate(executed) if e >= max(executed) / 2] or [0]
    lo, hi = min(hot), max(hot) + 1
    print(f"{len(data)} instructions, {total} samples; hot loop: instructions {lo} to {hi - 1}")
    for name, (a, b) in (("before", (0, lo)), ("loop", (lo, hi)), ("after", (hi, len(data)))):
        s = sum(samples[a:b])
        fetch = sum(get(r, "stall_no_inst") for r in data[a:b])
        print(f"  {name:6s} {b - a:6d} instructions {100 * s / total:5.1f}% of samples, "
              f"{100 * fetch / max(s, 1):4.0f}% of them waiting for instructions")
    for i in sorted(range(len(data)), key=lambda i: -samples[i])[:top]:
        r = data[i]
        reasons = sorted(((get(r, k), k[6:]) for k in REASONS if get(r, k)), reverse=True)[:3]
        text = " ".join(r[col["Source"]].split())[:60]
        print(f"  {samples[i]:7d} {100 * samples[i] / total:5.1f}% #{i:<5d} {text:60s} "
              + ", ".join(f"{k} {v}" for v, k in reasons))
    return 0


if __name__ == "__main__":
    sys.exit(main())
