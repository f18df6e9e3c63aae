"""Lint speed over every `.py` of the installed tensorflow and keras packages, against the libcst floor.

A generated module of 16 optional `ds = ds.map(...)` steps joins them: the lookups' memory keeps it under a
second, and without it the one file would take half a minute and break the cold target.

In one process: the floor (libcst `parse_module` plus one empty `CSTVisitor` walk) over the files the
prefilter lets through, then a cold `lint_paths(-j 1)` with an empty cache, a warm re-run that reads the
cache, and a cold run with one process per core. Ratios use CPU seconds of this process and its finished
children (other work on the machine stretches wall time, not CPU time); the -j N run is wall time. Targets: cold -j 1 <= 1.5 x floor,
warm <= 5% of cold. Usage:

    python benchmarks/lint_speed.py [--every K] [--skip-parallel]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import libcst as cst

from tfdoctor.config import load_settings
from tfdoctor.lint.engine import LintReport, lint_paths, should_parse
from tfdoctor.lint.parallel import job_count


class _Empty(cst.CSTVisitor):
    """Visits every node and does nothing: the cost of one walk."""


def package_dirs() -> list[Path]:
    dirs = []
    for name in ("tensorflow", "keras"):
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            sys.exit(f"error: {name} is not installed (pip install -e '.[profile]')")
        dirs.append(Path(list(spec.submodule_search_locations)[0]))
    return dirs


@contextmanager
def timed(into: dict[str, float], name: str) -> Iterator[None]:
    wall, cpu = time.perf_counter(), _cpu()
    yield
    into[f"{name} wall"] = time.perf_counter() - wall
    into[f"{name} cpu"] = _cpu() - cpu


def _cpu() -> float:
    """CPU seconds of this process and of its finished children (a serial run lints large files in one)."""
    times = os.times()
    return time.process_time() + times.children_user + times.children_system


def floor(files: list[Path]) -> int:
    """Parse and walk each file once; returns how many parsed."""
    parsed = 0
    for file in files:
        try:
            cst.parse_module(file.read_bytes()).visit(_Empty())
            parsed += 1
        except (cst.ParserSyntaxError, UnicodeDecodeError, LookupError, SyntaxError, RecursionError):
            pass
    return parsed


def branchy_pipeline(steps: int = 16) -> str:
    """A module whose pipeline takes `steps` optional `ds = ds.map(...)` steps, then trains under a strategy:
    every question about the pipeline meets every combination of the branches. Without the lookups' memory
    (6ecf976) 12 steps took 2.8 s to lint and 16 took 29 s; with it, well under a second."""
    lines = ["import tensorflow as tf", "", "", "def decode(ds, flags):"]
    for index in range(steps):
        lines += [f"    if flags.step{index}:",
                  f"        ds = ds.map(augment_{index}, num_parallel_calls=tf.data.AUTOTUNE)"]
    lines += ["    return ds.batch(64)", "", "", "strategy = tf.distribute.MirroredStrategy()",
              "with strategy.scope():", "    model = build_model()",
              "model.fit(decode(tf.data.TFRecordDataset(files), flags), epochs=3)", ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--every", type=int, default=1, help="lint every K-th file only (quick look; default: all)")
    parser.add_argument("--skip-parallel", action="store_true", help="leave out the -j N run")
    args = parser.parse_args()

    dirs = package_dirs()
    files = sorted(file for folder in dirs for file in folder.rglob("*.py"))[:: args.every]
    work = Path(tempfile.mkdtemp(prefix="tfdoctor-bench-"))
    inputs = work / "inputs"
    for index, file in enumerate(files):  # a flat copy: every run sees exactly these files
        target = inputs / f"{index:05d}_{file.name}"
        target.parent.mkdir(exist_ok=True)
        shutil.copyfile(file, target)
    (inputs / "zz_branchy_pipeline.py").write_text(branchy_pipeline())  # guards the lookups' memory
    os.chdir(work)  # the cache goes to ./.tfdoctor_cache (no [tool.tfdoctor] above the copies)
    settings = load_settings(inputs)
    copies = sorted(inputs.iterdir())
    to_parse = [file for file in copies if should_parse(file.read_bytes(), settings, file)]
    times: dict[str, float] = {}
    load = os.getloadavg()[0]

    with timed(times, "floor"):
        parsed = floor(to_parse)
    branchy = inputs / "zz_branchy_pipeline.py"
    with timed(times, "branchy floor"):
        floor([branchy])
    with timed(times, "branchy"):
        lint_paths([str(branchy)], jobs=1, cache=False)
    with timed(times, "cold"):
        cold = lint_paths([str(inputs)], jobs=1, cache=True)
    with timed(times, "warm"):
        warm = lint_paths([str(inputs)], jobs=1, cache=True)
    report_parallel: LintReport | None = None
    if not args.skip_parallel:
        shutil.rmtree(work / ".tfdoctor_cache")
        with timed(times, "parallel"):
            report_parallel = lint_paths([str(inputs)], jobs=0, cache=True)
        assert report_parallel.findings == cold.findings, "-j N reported differently from -j 1"
    assert warm.findings == cold.findings and warm.cached == len(to_parse), "the warm run missed the cache"
    shutil.rmtree(work)

    with_findings = len({finding.path for finding in cold.findings})
    rows = [
        ("files (.py of installed tensorflow + keras, and the generated one)", f"{cold.files}"),
        ("skipped by the prefilter (never parsed)", f"{cold.skipped} ({cold.skipped / cold.files:.0%})"),
        ("parsed by lint / parsable (floor)", f"{len(to_parse)} / {parsed}"),
        ("files with findings / findings", f"{with_findings} / {len(cold.findings)}"),
        ("floor: parse + empty walk, 1 process", f"{times['floor cpu']:.1f} s CPU ({times['floor wall']:.1f} s wall)"),
        ("cold lint -j 1, empty cache", f"{times['cold cpu']:.1f} s CPU ({times['cold wall']:.1f} s wall), "
                                        f"{cold.files / times['cold wall']:.1f} files/s"),
        ("warm lint -j 1, cached", f"{times['warm cpu']:.2f} s CPU ({times['warm wall']:.2f} s wall)"),
        ("16 optional `ds.map` steps: lint / floor of that file",
         f"{times['branchy cpu']:.2f} s / {times['branchy floor cpu']:.3f} s CPU"),
    ]
    if report_parallel is not None:
        rows.append((f"cold lint -j {job_count(0)} (wall)",
                     f"{times['parallel wall']:.1f} s, {cold.files / times['parallel wall']:.1f} files/s"))
    cold_ratio = times["cold cpu"] / times["floor cpu"]
    warm_ratio = times["warm cpu"] / times["cold cpu"]
    rows += [
        ("cold / floor (target <= 1.5)", f"{cold_ratio:.2f} {'ok' if cold_ratio <= 1.5 else 'MISSED'}"),
        ("warm / cold (target <= 5%)", f"{warm_ratio:.1%} {'ok' if warm_ratio <= 0.05 else 'MISSED'}"),
    ]
    print(f"Lint speed, {os.cpu_count()} cores, load average {load:.2f} at start\n")
    print("| measure | value |\n|---|---|")
    for name, value in rows:
        print(f"| {name} | {value} |")


if __name__ == "__main__":
    main()
