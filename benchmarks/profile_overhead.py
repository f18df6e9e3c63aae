"""What the profiler's timing costs a training step (trace off).

One process, one reference workload on logical devices: blocks of plain training steps (the loop a user
writes: `step(next(batches))`, waiting for the last output) alternate with blocks timed the way phase A
times them (two `perf_counter` calls and a wait on each step's output). Target: the timed blocks take at
most 2% longer. Prints the table. Usage:

    python benchmarks/profile_overhead.py [--replicas 2] [--steps 30] [--blocks 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from dataclasses import replace


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--blocks", type=int, default=15)
    parser.add_argument("--variant", default="tuned", choices=("naive", "tuned"))
    args = parser.parse_args()

    from tfdoctor.profile.phases import measure_full, wait
    from tfdoctor.profile.reference_workload import build
    from tfdoctor.reference.devices import setup_replicas

    strategy, kind, _ = setup_replicas(args.replicas)
    work = build(strategy, {"variant": args.variant, "img_size": 128, "width": 0.5})
    batches = work.batches()
    for _ in range(3):
        wait(work.step(next(batches)))

    def plain() -> float:
        start = time.perf_counter()
        out = None
        for _ in range(args.steps):
            out = work.step(next(batches))
        wait(out)
        return (time.perf_counter() - start) / args.steps

    same_input = replace(work, batches=lambda: batches)  # both loops draw from one iterator

    def timed() -> float:
        start = time.perf_counter()
        measure_full(same_input, args.steps, 0, lambda *_: None)
        return (time.perf_counter() - start) / args.steps

    plain_s, timed_s = [], []
    for _ in range(args.blocks):  # alternate short blocks, so drift of the machine hits both alike
        plain_s.append(plain())
        timed_s.append(timed())
    p, t = statistics.median(plain_s), statistics.median(timed_s)
    overhead = statistics.median(b / a - 1 for a, b in zip(plain_s, timed_s))  # median of paired ratios
    print(f"{'workload':<28} {work.name} on {args.replicas} {kind} replicas")
    print(f"{'plain loop, s/step (median)':<30} {p:.4f}")
    print(f"{'timed like phase A, s/step':<30} {t:.4f}")
    print(f"{'overhead (median paired ratio)':<30} {overhead:+.2%}  (target <= 2%: {'ok' if overhead <= 0.02 else 'over'})")
    print(f"{'load average at the end':<30} {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
