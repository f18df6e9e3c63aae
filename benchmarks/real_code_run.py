"""Lint every `.py` of large installed packages and the standard library, and report crashes, time and memory.

The packages are the top-level folders of a site-packages folder (default: this interpreter's) with at
least `--min-files` Python files (tensorflow, keras, numpy, pip, ...), plus the standard library. The lint
runs as a real `tfdoctor lint` subprocess with one process per core and no cache; the run's memory is the
sum of the proportional set sizes of it and its workers, sampled every 0.2 s. Target: zero internal
errors, exit 0 (never a signal), peak under 2 GB. Usage:

    python benchmarks/real_code_run.py [--site-packages DIR] [--min-files N]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

from tfdoctor.lint.parallel import MB, process_memory


def package_dirs(site_packages: Path, min_files: int) -> list[Path]:
    dirs = []
    for folder in sorted(site_packages.iterdir()):
        if folder.is_dir() and not folder.name.endswith(("-info", "__pycache__")) and not folder.name.startswith("_"):
            if sum(1 for _ in folder.rglob("*.py")) >= min_files:
                dirs.append(folder)
    return dirs


def tree_memory(pid: int) -> int:
    """Proportional set size of a process and its children (one level: the lint's workers)."""
    total = process_memory(pid)
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        children = []
    return total + sum(process_memory(int(child)) for child in children)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--site-packages", type=Path, default=Path(sysconfig.get_paths()["purelib"]))
    parser.add_argument("--min-files", type=int, default=50)
    args = parser.parse_args()
    dirs = package_dirs(args.site_packages, args.min_files) + [Path(sysconfig.get_paths()["stdlib"])]
    with tempfile.TemporaryDirectory(prefix="tfdoctor-real-") as work, \
            open(Path(work) / "out.json", "w+") as out, open(Path(work) / "err.txt", "w+") as err:
        start, peak = time.perf_counter(), 0
        process = subprocess.Popen([sys.executable, "-m", "tfdoctor", "lint", "--format", "json", "--exit-zero",
                                    "--no-cache", *map(str, dirs)], stdout=out, stderr=err, cwd=work)
        while process.poll() is None:
            peak = max(peak, tree_memory(process.pid))
            time.sleep(0.2)
        wall = time.perf_counter() - start
        out.seek(0), err.seek(0)
        stderr = err.read()
        report = json.loads(out.read() or "{}")
    internal = [line for line in stderr.splitlines() if "internal error" in line]
    summary = report.get("summary", {})
    print(f"folders: {', '.join(d.name for d in dirs)}")
    print("| measure | value |\n|---|---|")
    for name, value in [
        ("files linted (.py found)", summary.get("files")),
        ("not linted: over max-file-bytes", summary.get("oversize", 0)),
        ("TFD000 (cannot parse)", summary.get("by_code", {}).get("TFD000", 0)),
        ("findings", summary.get("findings")),
        ("internal errors", len(internal)),
        ("exit status", process.returncode),
        ("wall time", f"{wall:.0f} s ({os.cpu_count()} cores)"),
        ("peak memory (PSS, all processes)", f"{peak / MB:.0f} MB"),
    ]:
        print(f"| {name} | {value} |")
    for line in internal[:20]:
        print(line)
    ok = process.returncode == 0 and not internal and peak < 2048 * MB
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
