"""Profile the real training scripts and check each input share against an independent measurement.

For each script rebuilt by `benchmarks/real_scripts/rebuild.py` (DEST/<name>/), in its `workdir`:

1. `tfdoctor profile <profile flags> --format json -- <command>` runs `--runs` times, each with its own logdir;
2. the script runs plainly twice on the same replicas as the profile (`--gpus N`: N logical CPU devices or
   GPUs, which `MirroredStrategy()` without devices then uses; `--workers W`: W local processes with a
   `TF_CONFIG` each): once on its real input, once with `REAL_SCRIPTS_CACHED=1` (one cached batch). With
   `REAL_SCRIPTS_TIMES` the patched script appends a `time.perf_counter()` at each step boundary; the median
   of the `--window` step-to-step intervals after the profile's warm-up (its `workload.warmup_steps`: a
   `fit`'s first epoch, else `--warmup`), the steps the profile measures, gives the independent input share,
   1 - cached / real (clamped at 0).

Prints a table (name, style, exit, wall, verdict, profiler input share with its interval, independent share
with the range of its `--pairs`, their difference in points; none where the profile says input read inside each call is not separated, its share
then a lower bound; on logical CPU devices also with the profile's pipeline contention added, which the cached
run's speed-up holds too: there the pipeline's threads slow the step on the shared cores) and writes the rows as
JSON with `--json PATH`. Usage:

    python benchmarks/real_scripts.py [--dest /work/real_scripts] [--only NAME ...] [--runs K] [--launches L] [--pairs P]
        [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SCRIPTS = HERE / "real_scripts"
DEFAULT_DEST = Path("/work/real_scripts")
LAUNCH = "--launch"  # internal: run a script on N replicas, as the plain runs do


@dataclass
class Independent:
    """The plain runs: median step intervals on real and cached input, and the input share they give (the
    median over the pairs of runs, with the pairs' lowest and highest shares)."""

    real_s: float | None = None
    cached_s: float | None = None
    share: float | None = None
    steps: tuple[int, int] = (0, 0)
    error: str | None = None
    shares: list[float] = field(default_factory=list)  # one per pair of plain runs (real, then cached)


@dataclass
class Profiled:
    """One `tfdoctor profile` run."""

    exit: int
    wall_s: float
    primary: str | None = None
    statement: str | None = None
    input_share: float | None = None
    input_interval: list[float] | None = None
    shares: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    input_inside_calls: bool = False  # input read inside each call is in compute: the share is a lower bound
    contention_share: float | None = None  # the pipeline slowing the step on shared CPU cores (part of compute)
    contention_interval: list[float] | None = None  # its interval, as shares of the median step
    warmup_steps: int | None = None  # the steps before its window (a fit's first epoch, or --warmup)
    error: str | None = None


def replicas_and_workers(flags: list[str]) -> tuple[int, int]:
    """The `--gpus` and `--workers` of a script's profile flags (tfdoctor's defaults: 2 and 1)."""
    values = {"--gpus": 2, "--workers": 1}
    for flag, value in zip(flags, flags[1:]):
        if flag in values:
            values[flag] = int(value)
    return (1 if values["--workers"] > 1 else values["--gpus"]), values["--workers"]


def free_ports(count: int) -> list[int]:
    """Loopback ports free now."""
    sockets = [socket.socket() for _ in range(count)]
    for sock in sockets:
        sock.bind(("localhost", 0))
    ports = [sock.getsockname()[1] for sock in sockets]
    for sock in sockets:
        sock.close()
    return ports


def last_line(text: str) -> str:
    """The last line that says what went wrong (an exception line when there is one)."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    errors = [line for line in lines if "Error" in line.split(":")[0] or line.startswith("tfdoctor")]
    return (errors or lines or [""])[-1][:300]


def plain_run(script: dict[str, Any], folder: Path, cached: bool, times: Path, timeout: float) -> str | None:
    """Runs the script plainly (W workers when it is multi-worker); returns None or a one-line error."""
    replicas, workers = replicas_and_workers(script.get("profile", []))
    command = script["command"][1:]  # after "python"
    env = {**os.environ, **script.get("env", {}), "REAL_SCRIPTS_TIMES": str(times), "TF_CPP_MIN_LOG_LEVEL": "2"}
    env.pop("REAL_SCRIPTS_CACHED", None)
    if cached:
        env["REAL_SCRIPTS_CACHED"] = "1"
    launch = [sys.executable, str(Path(__file__).resolve()), LAUNCH, str(replicas), *command]
    ports = free_ports(workers) if workers > 1 else []
    processes = []
    with tempfile.TemporaryDirectory(prefix="real-scripts-log-") as logs:
        for index in range(workers):
            worker_env = dict(env)
            if workers > 1:
                worker_env["TF_CONFIG"] = json.dumps({"cluster": {"worker": [f"localhost:{p}" for p in ports]},
                                                      "task": {"type": "worker", "index": index}})
                if index:
                    worker_env["REAL_SCRIPTS_TIMES"] = f"{times}.{index}"
            log = open(Path(logs) / f"{index}.txt", "w+")
            processes.append((subprocess.Popen(launch, cwd=folder, env=worker_env, stdout=log, stderr=log), log))
        deadline, error = time.monotonic() + timeout, None
        for process, log in processes:
            try:
                code = process.wait(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                code = process.wait()
                error = error or f"timed out after {timeout:.0f} s"
            log.seek(0)
            if code != 0 and error is None:
                error = f"exit {code}: {last_line(log.read())}"
            log.close()
    return error


def median_interval(times: Path, warmup: int, window: int) -> tuple[float | None, int]:
    """The median of the `window` step-to-step intervals after `warmup` steps (the ones the profiler measures:
    a script whose later steps differ, a frozen backbone unfrozen in a later epoch, is compared on the same
    steps), and how many intervals it is taken over."""
    try:
        stamps = [float(line) for line in times.read_text().split()]
    except (OSError, ValueError):
        return None, 0
    gaps = [b - a for a, b in zip(stamps, stamps[1:])][warmup:warmup + window]
    return (statistics.median(gaps) if gaps else None), len(gaps)


def independent(script: dict[str, Any], folder: Path, warmup: int, window: int, timeout: float,
                pairs: int = 1) -> Independent:
    """`pairs` times, a real then a cached plain run; the input share each pair gives, and their median. A
    script's own speed differs from launch to launch (an autotuned pipeline on shared cores), so one pair
    alone may be off by as much as the profile it checks."""
    result = Independent()
    reals, cacheds = [], []
    with tempfile.TemporaryDirectory(prefix="real-scripts-times-") as tmp:
        for pair in range(pairs):
            medians, counts = [], []
            for cached in (False, True):
                times = Path(tmp) / f"{'cached' if cached else 'real'}-{pair}.txt"
                error = plain_run(script, folder, cached, times, timeout)
                median, count = median_interval(times, warmup, window)
                if error or median is None:
                    result.error = f"{'cached' if cached else 'real'} run: {error or f'{count} step intervals'}"
                    return result
                medians.append(median)
                counts.append(count)
            reals.append(medians[0])
            cacheds.append(medians[1])
            result.shares.append(max(0.0, 1.0 - medians[1] / medians[0]))
    result.real_s, result.cached_s, result.steps = statistics.median(reals), statistics.median(cacheds), (
        counts[0], counts[1])
    result.share = statistics.median(result.shares)
    return result


def profile(script: dict[str, Any], folder: Path, timeout: float, launches: int = 1) -> Profiled:
    """One `tfdoctor profile` run of the script's command (of `launches` launches, on one host)."""
    env = {**os.environ, **script.get("env", {}), "TF_CPP_MIN_LOG_LEVEL": "2",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    for name in ("REAL_SCRIPTS_CACHED", "REAL_SCRIPTS_TIMES"):
        env.pop(name, None)
    with tempfile.TemporaryDirectory(prefix="real-scripts-profile-") as tmp:
        output = Path(tmp) / "profile.json"
        flags = [*script.get("profile", []), *(["--launches", str(launches)] if launches > 1 and
                                                 "--workers" not in script.get("profile", []) else [])]
        command = [sys.executable, "-m", "tfdoctor", "profile", *flags, "--format", "json",
                   "--logdir", str(Path(tmp) / "logdir"), "--output", str(output), "--", *script["command"]]
        start = time.perf_counter()
        try:
            done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=timeout)
            code, stderr = done.returncode, done.stderr + done.stdout
        except subprocess.TimeoutExpired as exc:
            code, stderr = 124, f"timed out after {timeout:.0f} s {exc.stderr or ''}"
        result = Profiled(code, time.perf_counter() - start)
        try:
            report = json.loads(output.read_text())
        except (OSError, ValueError):
            result.error = last_line(stderr if isinstance(stderr, str) else stderr.decode(errors="replace"))
            return result
    verdict = report.get("verdict") or {}
    result.primary, result.statement = verdict.get("primary"), verdict.get("statement")
    result.shares = report.get("shares") or {}
    result.input_share = result.shares.get("input")
    result.input_interval = ((report.get("intervals") or {}).get("input") or {}).get("share")
    result.notes = report.get("notes") or []
    result.warmup_steps = (report.get("workload") or {}).get("warmup_steps")
    result.input_inside_calls = bool(report.get("input_inside_calls"))
    contention, step = report.get("pipeline_contention_s"), (report.get("step_time_s") or {}).get("median")
    result.contention_share = contention / step if contention is not None and step else None
    spread = report.get("pipeline_contention_interval_s")
    result.contention_interval = [value / step for value in spread] if spread and step else None
    if code != 0:
        result.error = last_line(stderr)
    return result


def percent(share: float | None) -> str:
    return "-" if share is None else f"{100 * share:.0f}%"


def row_text(row: dict[str, Any]) -> str:
    """One table row per profile run."""
    ind: Independent = row["independent"]
    cells = []
    for run in row["profiles"]:
        interval = run.input_interval
        profiled = percent(run.input_share) + (f" [{percent(interval[0])}, {percent(interval[1])}]" if interval else "")
        if run.contention_share:  # the independent share holds it too: the cached run frees the cores
            profiled += f" + contention {percent(run.contention_share)}" + (
                f" [{percent(run.contention_interval[0])}, {percent(run.contention_interval[1])}]"
                if run.contention_interval else "")
        diff = ("-" if run.input_share is None or ind.share is None
                else "n/a: a lower bound" if run.input_inside_calls  # input inside the calls is not separated
                else f"{100 * abs(run.input_share - ind.share):.0f}")
        if run.contention_share and ind.share is not None and run.input_share is not None:
            diff += f" ({100 * abs(run.input_share + run.contention_share - ind.share):.0f} with contention)"
        verdict = run.primary or f"error: {run.error}"
        spread = f" [{percent(min(ind.shares))}, {percent(max(ind.shares))}]" if len(ind.shares) > 1 else ""
        cells.append(f"| {row['name']} | {row['style']} | {run.exit} | {run.wall_s:.0f} | {verdict} | {profiled} | "
                     f"{percent(ind.share) + spread if ind.error is None else 'error: ' + ind.error} | {diff} |")
    return "\n".join(cells)


def launch(argv: list[str]) -> None:
    """Internal: `--launch N script ARGS` runs the script as `__main__` on N replicas, as the profile does."""
    import runpy

    replicas, script, args = int(argv[0]), argv[1], argv[2:]
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]  # as if the script ran alone
    if "TF_CONFIG" not in os.environ:
        import tensorflow as tf

        from tfdoctor.reference.devices import setup_replicas

        _, _, names = setup_replicas(replicas)
        original = tf.distribute.MirroredStrategy.__init__

        def with_replicas(self: Any, devices: Any = None, *rest: Any, **kwargs: Any) -> None:
            original(self, devices or names, *rest, **kwargs)

        tf.distribute.MirroredStrategy.__init__ = with_replicas
    if script == "-m":
        sys.argv = ["-m", *args[1:]]
        sys.path.insert(0, os.getcwd())
        runpy.run_module(args[0], run_name="__main__", alter_sys=True)
    else:
        sys.argv = [script, *args]
        sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
        runpy.run_path(script, run_name="__main__")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dest", type=Path, default=DEFAULT_DEST, help=f"the rebuilt scripts ({DEFAULT_DEST})")
    parser.add_argument("--only", action="append", help="run only this script (repeatable)")
    parser.add_argument("--runs", type=int, default=1, help="profiles per script (variance check)")
    parser.add_argument("--warmup", type=int, default=2, help="step intervals left out of the plain runs' medians "
                        "when the profile does not say how many steps its warm-up took (the profile's default)")
    parser.add_argument("--window", type=int, default=10, help="step intervals in the plain runs' medians (the "
                        "profile's default steps)")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per run")
    parser.add_argument("--pairs", type=int, default=1, help="pairs of plain runs (real, cached) per script: the "
                        "independent share is their median, shown with their range")
    parser.add_argument("--no-independent", action="store_true", help="profile only")
    parser.add_argument("--launches", type=int, default=1, help="launches per profile (`tfdoctor profile --launches`; "
                        "not for multi-worker scripts)")
    parser.add_argument("--json", type=Path, help="write the rows here")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    names = [p.parent.name for p in sorted(SCRIPTS.glob("*/script.json"))]
    rows = []
    print("| name | style | exit | wall s | verdict | input (profiler) | input (independent) | diff pts |")
    print("|---|---|---|---|---|---|---|---|", flush=True)
    for name in names:
        if args.only and name not in args.only:
            continue
        script = json.loads((SCRIPTS / name / "script.json").read_text())
        folder = args.dest / name / script.get("workdir", ".")
        if not folder.is_dir():
            print(f"| {name} | {script.get('style', '')} | - | - | not built: run rebuild.py | - | - | - |")
            continue
        runs = [profile(script, folder, args.timeout, args.launches) for _ in range(args.runs)]
        warmup = next((run.warmup_steps for run in runs if run.warmup_steps is not None), args.warmup)
        ind = Independent(error="not run") if args.no_independent else independent(
            script, folder, warmup, args.window, args.timeout, args.pairs)
        row = {"name": name, "style": script.get("style", ""), "independent": ind, "profiles": runs}
        rows.append(row)
        print(row_text(row), flush=True)
    if args.json:
        args.json.write_text(json.dumps([{**row, "independent": asdict(row["independent"]),
                                          "profiles": [asdict(p) for p in row["profiles"]]} for row in rows],
                                        indent=1))
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == LAUNCH:
        sys.path.insert(0, str(ROOT))
        launch(sys.argv[2:])
    else:
        sys.exit(main())
