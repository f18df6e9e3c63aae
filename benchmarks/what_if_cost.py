"""What the measured what-if costs: the reference profile without `--what-if`, then with `--what-if all`, the
seconds each change added (between the arrivals of its result and the one before it) and the whole run.

    python benchmarks/what_if_cost.py [--pipeline tuned|naive] [--gpus 2]

Targets (issue 22): each change adds at most about 20 s on this 2-core machine, and `--what-if all` on the
default reference finishes within 4 minutes. Ratios and seconds of one run, printed; nothing is asserted.

Measured on 2026-12-02, quiet machine (load average 0.04), reference tuned on 2 logical CPU replicas: profile
41 s, with --what-if all 151 s (+110 s); input-on-device 7.4 s, tf-data-tuned 10.3 s, batch-x2 18.2 s, xla
17.0 s, mixed-precision 0 s (not applied on CPU), all-reduce HierarchicalCopyAllReduce 17.2 s and
ReductionToOneDevice 16.7 s, steps-per-call 22.1 s (tracing the 4-step graph). The naive reference with
--what-if all took 3 min 29 s: input-on-device 1.35x (1.33-1.38), tf-data-tuned 1.33x (1.30-1.36) first.
"""

from __future__ import annotations

import argparse
import time

from tfdoctor.profile import protocol
from tfdoctor.profile.measure import Options, profile
from tfdoctor.profile.what_if import CHANGES

CHANGE_TARGET_S, TOTAL_TARGET_S = 20.0, 240.0


def _timed_profile(options: Options) -> tuple[float, list[tuple[str, float]], float]:
    """Wall seconds of one profile, each tried change's (name, seconds since the previous result), and the
    seconds until the first what-if result came (the profile itself)."""
    started = time.perf_counter()
    arrivals: list[tuple[str, float]] = []
    measured_at: list[float] = []

    def on_event(event: protocol.Event) -> None:
        now = time.perf_counter()
        if isinstance(event, protocol.Measured):
            measured_at.append(now)
        elif isinstance(event, protocol.WhatIf):
            arrivals.append((event.change, now))
    profile(options, on_event)
    total = time.perf_counter() - started
    previous = measured_at[0] if measured_at else started
    costs = []
    for change, at in arrivals:
        costs.append((change, at - previous))
        previous = at
    return total, costs, (measured_at[0] - started) if measured_at else total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pipeline", choices=("tuned", "naive"), default="tuned")
    parser.add_argument("--gpus", type=int, default=2)
    args = parser.parse_args()
    base = Options(gpus=args.gpus, variant=args.pipeline)
    plain, _, _ = _timed_profile(base)
    with_all, costs, _ = _timed_profile(Options(gpus=args.gpus, variant=args.pipeline, what_if=CHANGES))
    print(f"reference {args.pipeline} on {args.gpus} replicas: profile {plain:.0f} s; with --what-if all "
          f"{with_all:.0f} s (+{with_all - plain:.0f} s; target <= {TOTAL_TARGET_S:.0f} s in all: "
          f"{'met' if with_all <= TOTAL_TARGET_S else 'NOT met'})")
    for change, seconds in costs:
        print(f"  {change:<36} {seconds:5.1f} s  {'ok' if seconds <= CHANGE_TARGET_S else 'over ~20 s'}")


if __name__ == "__main__":
    main()
