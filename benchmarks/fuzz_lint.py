"""Fuzz the linter at scale: generated programs and mutated fixtures through the real command line.

Inputs: hypothesmith programs (after a TensorFlow prelude, so the prefilter lets them through) and mutations
of every fixture program: truncation, duplicated lines, deep nesting of ten kinds, random bytes, mixed
encodings, CRLF and CR line ends, tabs, byte-order marks and NUL bytes, one to three at a time. They are
written to folders of FOLDER_SIZE files and linted with `tfdoctor lint --format json -j 2 --no-cache`.

Each input must give findings, a TFD000 line, or nothing: never a traceback, an internal error, a signal or a
hang (a folder running past its time). Then every input with a fixable finding is fixed with `--fix
--unsafe-fixes`: what Python could parse before must parse after, and a second `--fix` must change nothing.
Inputs that fail are copied to `--keep DIR` (fixtures/crashes/ keeps the ones that once failed). Usage:

    python benchmarks/fuzz_lint.py [--count 10000] [--seed 0] [--keep DIR]
"""

from __future__ import annotations

import argparse
import ast
import json
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

ROOT = Path(__file__).resolve().parent.parent
PRELUDE = "import tensorflow as tf\nstrategy = tf.distribute.MirroredStrategy()\n"
FOLDER_SIZE = 500
SECONDS_PER_FOLDER = 1800
# Depths around CPython's limits (200 brackets, about 3,000 levels) and far past them.
DEPTHS = (10, 150, 250, 1000, 2500, 5000, 20000)
_NESTINGS: dict[str, Callable[[int], str]] = {
    "parentheses": lambda n: "(" * n + "x" + ")" * n,
    "lists": lambda n: "[" * n + "x" + "]" * n,
    "minus": lambda n: "-" * n + "x",
    "not": lambda n: "not " * n + "x",
    "lambda": lambda n: "lambda: " * n + "x",
    "ternary": lambda n: "x if y else " * n + "x",
    "sum": lambda n: "x + " * n + "x",
    "or": lambda n: "x or " * n + "x",
    "calls": lambda n: "f" + "()" * min(n, 1000),  # libcst's time grows with the cube of a trailer chain
    "attributes": lambda n: "x" + ".a" * min(n, 1000),
}


@dataclass
class Outcome:
    inputs: Counter[str] = field(default_factory=Counter)  # by origin
    findings: int = 0
    parse_errors: int = 0
    failures: list[str] = field(default_factory=list)  # one line each: input and what went wrong
    fixed_files: int = 0
    fix_failures: list[str] = field(default_factory=list)


def hypothesmith_programs(count: int, seed: int) -> list[str]:
    """`count` programs from hypothesmith's grammar strategy (Hypothesis' generate phase only)."""
    import hypothesmith
    from hypothesis import HealthCheck, Phase, given, seed as fixed_seed, settings

    programs: list[str] = []

    @fixed_seed(seed)
    @settings(max_examples=count, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(hypothesmith.from_grammar())
    def collect(program: str) -> None:
        programs.append(program)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        collect()
    return programs[:count]


def fixtures() -> list[bytes]:
    return [path.read_bytes() for path in sorted((ROOT / "fixtures").rglob("*.py"))
            if "crashes" not in path.parts]


def _lines(source: bytes) -> list[bytes]:
    return source.splitlines(keepends=True) or [b"\n"]


def _truncate(source: bytes, rng: random.Random) -> bytes:
    return source[:rng.randrange(len(source) + 1)]


def _duplicate(source: bytes, rng: random.Random) -> bytes:
    lines = _lines(source)
    start = rng.randrange(len(lines))
    block = lines[start:start + rng.randint(1, 5)]
    return b"".join(lines[:start] + block * rng.randint(2, 50) + lines[start:])


def _nest(source: bytes, rng: random.Random) -> bytes:
    kind = rng.choice(sorted(_NESTINGS))
    depth = rng.choice(DEPTHS)
    lines = _lines(source)
    at = rng.randrange(len(lines) + 1)
    if rng.random() < 0.2:  # a long elif chain, or deep indentation
        deep = "if x:\n    pass\n" + "elif x:\n    pass\n" * depth if rng.random() < 0.5 else \
            "".join(" " * i + "if x:\n" for i in range(min(depth, 300))) + " " * min(depth, 300) + "pass\n"
    else:
        deep = f"y = {_NESTINGS[kind](depth)}\n"
    return b"".join(lines[:at]) + deep.encode() + b"".join(lines[at:])


def _random_bytes(source: bytes, rng: random.Random) -> bytes:
    data = bytearray(source)
    for _ in range(rng.randint(1, 20)):
        at = rng.randrange(len(data) + 1)
        data[at:at + rng.randint(0, 3)] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
    return bytes(data)


def _encoding(source: bytes, rng: random.Random) -> bytes:
    text = source.decode("utf-8", errors="replace")
    choice = rng.randrange(5)
    if choice == 0:  # a latin-1 line in a UTF-8 file
        return source + "name = 'caf\xe9 na\xefve'\n".encode("latin-1")
    if choice == 1:  # a cookie that matches
        return b"# -*- coding: latin-1 -*-\n" + text.encode("latin-1", errors="replace")
    if choice == 2:  # a cookie that lies
        return b"# -*- coding: ascii -*-\n" + source + "s = '\u00fc\u4e2d'\n".encode()
    if choice == 3:  # UTF-16 with its BOM
        return text.encode("utf-16")
    return b"# coding: " + rng.choice([b"klingon", b"utf-8-sig", b"cp1252", b"utf-7"]) + b"\n" + source


def _line_ends(source: bytes, rng: random.Random) -> bytes:
    if rng.random() < 0.5:
        return source.replace(b"\n", b"\r\n")
    lines = _lines(source)
    return b"".join(line.rstrip(b"\n") + rng.choice([b"\n", b"\r\n", b"\r"]) for line in lines)


def _tabs(source: bytes, rng: random.Random) -> bytes:
    lines = _lines(source)
    out = []
    for line in lines:
        stripped = line.lstrip(b" ")
        indent = len(line) - len(stripped)
        if indent and rng.random() < 0.5:
            line = b"\t" * (indent // 4) + b" " * (indent % 4 if rng.random() < 0.5 else 0) + stripped
        out.append(line)
    return b"".join(out)


def _bom(source: bytes, rng: random.Random) -> bytes:
    return rng.choice([b"\xef\xbb\xbf", b"\xff\xfe", b"\xfe\xff", b"\xef\xbb\xbf\xef\xbb\xbf"]) + source


def _nul(source: bytes, rng: random.Random) -> bytes:
    at = rng.randrange(len(source) + 1)
    return source[:at] + b"\0" * rng.randint(1, 3) + source[at:]


MUTATIONS: dict[str, Callable[[bytes, random.Random], bytes]] = {
    "truncate": _truncate, "duplicate-lines": _duplicate, "deep-nesting": _nest, "random-bytes": _random_bytes,
    "encodings": _encoding, "line-ends": _line_ends, "tabs": _tabs, "bom": _bom, "nul": _nul,
}


def inputs(count: int, seed: int, hypothesmith_share: float = 0.25) -> Iterator[tuple[str, bytes]]:
    """(origin, bytes) for `count` inputs, in blocks of 100: hypothesmith programs, then mutated fixtures."""
    rng = random.Random(seed)
    sources = fixtures()
    for block in range(0, count, 100):
        size = min(100, count - block)
        generated = round(size * hypothesmith_share)
        for program in hypothesmith_programs(generated, seed + block):
            yield "hypothesmith", (PRELUDE + program).encode()
        for _ in range(size - generated):
            source = rng.choice(sources)
            names = rng.sample(sorted(MUTATIONS), rng.randint(1, 3))
            for name in names:
                source = MUTATIONS[name](source, rng)
            yield "+".join(sorted(names)), source


def _lint(folder: Path, *extra: str) -> subprocess.CompletedProcess[str] | None:
    try:
        return subprocess.run([sys.executable, "-m", "tfdoctor", "lint", "--no-cache", "--exit-zero", "-j", "2",
                               *extra, str(folder)], capture_output=True, text=True, timeout=SECONDS_PER_FOLDER)
    except subprocess.TimeoutExpired:
        return None


def _problems(result: subprocess.CompletedProcess[str] | None, what: str) -> list[str]:
    if result is None:
        return [f"{what}: hung (no result in {SECONDS_PER_FOLDER} s)"]
    problems = [f"{what}: exited with signal {-result.returncode}"] if result.returncode < 0 else []
    if "Traceback" in result.stderr:
        problems.append(f"{what}: traceback: {result.stderr.strip().splitlines()[-1]}")
    problems += [line for line in result.stderr.splitlines() if "internal error" in line]
    if result.returncode not in (0, 2) and result.returncode >= 0:
        problems.append(f"{what}: exit status {result.returncode}")
    return problems


def _python_parses(source: bytes) -> bool:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ast.parse(source)
        return True
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False


def run(count: int, seed: int, keep: Path | None = None, hypothesmith_share: float = 0.25,
        progress: bool = False) -> Outcome:
    outcome = Outcome()
    with tempfile.TemporaryDirectory(prefix="tfdoctor-fuzz-") as work:
        fixable: list[Path] = []
        batch: list[tuple[str, bytes]] = []
        for index, (origin, source) in enumerate(inputs(count, seed, hypothesmith_share), 1):
            batch.append((origin, source))
            if len(batch) == FOLDER_SIZE or index == count:
                fixable += _lint_batch(Path(work) / f"batch{index // FOLDER_SIZE:03d}", batch, outcome, keep)
                batch = []
                if progress:
                    print(f"{sum(outcome.inputs.values())} inputs linted, {len(outcome.failures)} failures",
                          file=sys.stderr, flush=True)
        outcome.fix_failures = _check_fixes(fixable, Path(work) / "fix", outcome)
    return outcome


def _lint_batch(folder: Path, batch: list[tuple[str, bytes]], outcome: Outcome, keep: Path | None) -> list[Path]:
    """Lint one folder of inputs; the files with fixable findings."""
    folder.mkdir()
    start = sum(outcome.inputs.values())
    for offset, (origin, source) in enumerate(batch):
        (folder / f"i{start + offset:05d}_{origin.replace('+', '_')}.py").write_bytes(source)
        outcome.inputs[origin] += 1
    result = _lint(folder, "--format", "json")
    problems = _problems(result, folder.name)
    outcome.failures += problems
    _keep(problems, folder, keep)
    if result is None or not result.stdout.strip():
        return []
    findings = json.loads(result.stdout)["findings"]
    outcome.findings += len(findings)
    outcome.parse_errors += sum(1 for f in findings if f["code"] == "TFD000")
    return sorted({Path(f["path"]) for f in findings if f["fixable"]})


def _check_fixes(files: list[Path], folder: Path, outcome: Outcome) -> list[str]:
    """Fix copies of the files twice: what parsed still parses, the second pass changes nothing."""
    folder.mkdir()
    originals = {}
    for file in files:
        copy = folder / file.name
        shutil.copyfile(file, copy)
        originals[copy] = file.read_bytes()
    if not originals:
        return []
    failures = _problems(_lint(folder, "--fix", "--unsafe-fixes"), "first --fix")
    after = {copy: copy.read_bytes() for copy in originals}
    outcome.fixed_files = sum(1 for copy in originals if after[copy] != originals[copy])
    failures += [f"{copy.name}: --fix output does not parse" for copy in originals
                 if after[copy] != originals[copy] and _python_parses(originals[copy]) and not _python_parses(after[copy])]
    failures += _problems(_lint(folder, "--fix", "--unsafe-fixes"), "second --fix")
    failures += [f"{copy.name}: a second --fix changed it again" for copy in originals if copy.read_bytes() != after[copy]]
    return failures


def _keep(problems: list[str], folder: Path, keep: Path | None) -> None:
    if keep is None:
        return
    for problem in problems:
        named = re.search(r"i\d{5}_[\w-]+\.py", problem)
        candidate = folder / named.group() if named else folder
        if candidate.is_file():
            keep.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(candidate, keep / candidate.name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--keep", type=Path, help="copy each failing input here")
    parser.add_argument("--hypothesmith-share", type=float, default=0.25,
                        help="the share of hypothesmith programs among the inputs (default: 0.25)")
    args = parser.parse_args()
    start = time.perf_counter()
    outcome = run(args.count, args.seed, args.keep, args.hypothesmith_share, progress=True)
    wall = time.perf_counter() - start
    print(f"Fuzzed {sum(outcome.inputs.values())} inputs in {wall:.0f} s (seed {args.seed})\n")
    print("| origin (a mutated input counts once per mutation in it) | inputs |\n|---|---|")
    by_mutation = Counter({"hypothesmith": outcome.inputs["hypothesmith"]})
    for origin, number in outcome.inputs.items():
        for name in origin.split("+") if origin != "hypothesmith" else ():
            by_mutation[name] += number
    for origin, number in by_mutation.most_common():
        print(f"| {origin} | {number} |")
    print()
    print(f"findings: {outcome.findings} ({outcome.parse_errors} TFD000)")
    print(f"crashes, tracebacks, internal errors, hangs: {len(outcome.failures)}")
    print(f"fixed files: {outcome.fixed_files}; fix failures (output not parsing, second --fix changing): "
          f"{len(outcome.fix_failures)}")
    for line in (outcome.failures + outcome.fix_failures)[:30]:
        print(f"  {line}")
    sys.exit(1 if outcome.failures or outcome.fix_failures else 0)


if __name__ == "__main__":
    main()
