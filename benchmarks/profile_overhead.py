"""What the profiler's timing costs a training step (trace off).

One process, one reference workload on logical devices. Phase A times each step with two `perf_counter`
calls around `next(batches)`, a wait on every output of the step and a progress event on the event channel. The benchmark
measures that bookkeeping directly, as the time it adds per step to a loop whose step is free (a finished
output), over many steps, and divides it by the real step's time: the target is at most 2%. Waiting on each
output could also cost overlap between steps; the benchmark measures whether a step call returns before its
work is done (it does not on the CPU's synchronous executor, so no overlap is lost there; on a GPU it would be).
As a cross-check it alternates blocks of a plain loop (`step(next(batches))`, one wait at the end) with blocks
timed like phase A and prints their paired difference, whose spread is the machine's noise. Usage:

    python benchmarks/profile_overhead.py [--replicas 2] [--variant tuned] [--blocks 15] [--steps 10]
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import time
from dataclasses import replace
from typing import Any, Callable

from tfdoctor.profile.protocol import EVENT_FD_ENV


def _per_step(loop: Callable[[int], None], steps: int, repeats: int = 5) -> float:
    """Fastest of `repeats` runs of `loop(steps)`, in seconds per step."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        loop(steps)
        best = min(best, (time.perf_counter() - start) / steps)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--variant", default="tuned", choices=("naive", "tuned"))
    parser.add_argument("--blocks", type=int, default=15, help="paired blocks in the cross-check")
    parser.add_argument("--steps", type=int, default=10, help="steps per block in the cross-check")
    args = parser.parse_args()

    # Progress events go on the event channel as in a real run: here a descriptor open on /dev/null.
    os.environ[EVENT_FD_ENV] = str(os.open(os.devnull, os.O_WRONLY))
    from tfdoctor.profile.phases import measure_full, wait
    from tfdoctor.profile.reference_workload import build
    from tfdoctor.profile.worker import CHANNEL
    from tfdoctor.reference.devices import setup_replicas

    strategy, kind, _ = setup_replicas(args.replicas)
    work = build(strategy, {"variant": args.variant, "img_size": 128})
    batches = work.batches()
    for _ in range(3):
        wait(work.step(next(batches)))

    # The real step, and whether its call returns before the work is done.
    calls, steps = [], []
    for _ in range(10):
        start = time.perf_counter()
        out = work.step(next(batches))
        returned = time.perf_counter()
        wait(out)
        calls.append(returned - start)
        steps.append(time.perf_counter() - start)
    step_s, call_s = statistics.median(steps), statistics.median(calls)

    # The bookkeeping alone: phase A's loop and a plain loop around a step that costs nothing.
    done = out
    free = replace(work, step=lambda batch: done)

    def plain_free(count: int) -> None:
        items = itertools.repeat(None)
        result = None
        for _ in range(count):
            result = free.step(next(items))
        wait(result)

    def timed_free(count: int) -> None:
        measure_full(free, itertools.repeat(None), count, 0, CHANNEL.progress)  # events as the worker writes them

    bookkeeping_s = _per_step(timed_free, 20_000) - _per_step(plain_free, 20_000)
    direct = bookkeeping_s / step_s

    # Cross-check end to end: paired blocks, plain and timed, on the real step.

    def plain_block() -> float:
        start = time.perf_counter()
        result: Any = None
        for _ in range(args.steps):
            result = work.step(next(batches))
        wait(result)
        return (time.perf_counter() - start) / args.steps

    def timed_block() -> float:
        start = time.perf_counter()
        measure_full(work, batches, args.steps, 0, lambda *_: None)  # both loops draw from one iterator
        return (time.perf_counter() - start) / args.steps

    ratios = []
    for _ in range(args.blocks):
        plain, timed = plain_block(), timed_block()
        ratios.append(timed / plain - 1)
    quartiles = statistics.quantiles(ratios, n=4)

    print(f"{'workload':<34} {work.name} on {args.replicas} {kind} replicas")
    print(f"{'step, s (median of 10)':<34} {step_s:.4f}")
    print(f"{'the call returns after, s':<34} {call_s:.4f}  "
          f"({'synchronous: a wait per step loses no overlap' if call_s >= 0.9 * step_s else 'asynchronous'})")
    print(f"{'bookkeeping per step, us':<34} {bookkeeping_s * 1e6:.1f}")
    print(f"{'overhead (bookkeeping / step)':<34} {direct:+.3%}  (target <= 2%: {'ok' if direct <= 0.02 else 'over'})")
    print(f"{'end to end, paired blocks':<34} {statistics.median(ratios):+.2%} median, "
          f"{quartiles[0]:+.2%} to {quartiles[2]:+.2%} interquartile (the machine's noise)")
    print(f"{'load average at the end':<34} {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
