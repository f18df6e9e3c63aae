"""Images/s of the naive and tuned reference training loops at N = 1 and N = 2 replicas.

Each run is its own ``tfdoctor reference --json`` process, because logical devices are fixed per
process. Runs alternate naive and tuned so slow drift of the machine affects both alike. Other work
on the machine only ever slows a run down, so each cell shows the best of ``--repeats`` runs, and the
1-minute load average at the start is printed with the table. Usage:

    python benchmarks/reference_throughput.py [--steps 60] [--replicas 1,2] [--repeats 3] [...]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

VARIANTS = ("naive", "tuned")


def run_once(variant: str, replicas: int, args: argparse.Namespace) -> dict:
    command = [
        sys.executable, "-m", "tfdoctor", "reference", "--json",
        "--variant", variant, "--replicas", str(replicas), "--steps", str(args.steps),
        "--model", args.model, "--img-size", str(args.img_size), "--batch-per-replica", str(args.batch_per_replica),
        "--width", str(args.width), "--source-size", str(args.source_size),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"error: {' '.join(command[1:])} failed:\n{done.stderr.strip()}")
    return json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60, help="steps per run; the first is not timed")
    parser.add_argument("--replicas", default="1,2", help="comma-separated replica counts")
    parser.add_argument("--repeats", type=int, default=3, help="runs per cell; the best is shown")
    parser.add_argument("--model", default="yolov3-tiny")
    parser.add_argument("--img-size", type=int, default=128)
    parser.add_argument("--batch-per-replica", type=int, default=4)
    # The profiler's CPU set-up: a thinner model keeps compute near what a GPU spends on the full one, and
    # photos larger than the network input, as real data sets have.
    parser.add_argument("--width", type=float, default=0.25)
    parser.add_argument("--source-size", type=int, default=1024)
    args = parser.parse_args()
    replica_counts = [int(n) for n in args.replicas.split(",")]

    rates: dict[tuple[str, int], list[float]] = {}
    load_at_start = os.getloadavg()[0]
    for _ in range(args.repeats):
        for replicas in replica_counts:
            for variant in VARIANTS:
                report = run_once(variant, replicas, args)
                rates.setdefault((variant, replicas), []).append(report["images_per_s"])
                print(
                    f"  {variant} N={replicas}: {report['images_per_s']:.1f} images/s, "
                    f"loss {report['loss_first']:.1f} -> {report['loss_last']:.1f}",
                    file=sys.stderr,
                )

    print(
        f"{args.model} width {args.width} at {args.img_size} px from {args.source_size} px photos, "
        f"{args.batch_per_replica} images per replica, {args.steps} steps "
        f"(first untimed), best of {args.repeats}; load average at start {load_at_start:.2f} "
        f"on {os.cpu_count()} cores"
    )
    print(f"{'N':>3} {'naive img/s':>12} {'tuned img/s':>12} {'tuned/naive':>12}")
    for replicas in replica_counts:
        naive, tuned = max(rates[("naive", replicas)]), max(rates[("tuned", replicas)])
        print(f"{replicas:>3} {naive:>12.1f} {tuned:>12.1f} {tuned / naive:>11.2f}x")


if __name__ == "__main__":
    main()
