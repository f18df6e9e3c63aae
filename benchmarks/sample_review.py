"""A seeded, uniform random sample of the linter's findings over corpus trees, for a blind review: what a user
reads when they run tfdoctor on their repository, not what the rules were tuned on.

Each repository folder (owner__name under each tree) is linted on its own, as its user would; each keeps at
most CAP of its findings (a seeded choice), so one repository of bug-report snippets cannot fill the sample;
then SIZE findings are drawn uniformly from the pool. The output is one JSON object per finding, with a
number, for the reviewer to judge (useful / doubtful / wrong) from the rule pages and the source alone.

    python benchmarks/sample_review.py TREE [TREE ...] [--size 60] [--cap 10] [--seed 1] [--out sample.jsonl] [--jobs 2]
        [--select CODES]   # default: the rules a user gets without `select` (the opt-in ones left out)
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path


def lint_repository(folder: Path, select: str | None = None) -> list[dict]:
    """The findings of one repository folder (JSON output, no cache; paths as tfdoctor prints them)."""
    chosen = ["--select", select] if select else []
    result = subprocess.run([sys.executable, "-m", "tfdoctor", "lint", "--format", "json", "--no-cache",
                             "--exit-zero", "-j", "1", *chosen, str(folder)], capture_output=True, text=True,
                            check=False)
    if result.returncode != 0:
        print(f"sample_review: {folder.name}: lint exited {result.returncode}: {result.stderr.strip()[-200:]}",
              file=sys.stderr)
        return []
    return [finding for finding in json.loads(result.stdout)["findings"] if finding["code"] != "TFD000"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trees", nargs="+", type=Path)
    parser.add_argument("--size", type=int, default=60)
    parser.add_argument("--cap", type=int, default=10)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path("sample.jsonl"))
    parser.add_argument("--jobs", type=int, default=2, help="repositories linted at once")
    parser.add_argument("--select", help="codes or prefixes to lint with (default: the user's default rules)")
    args = parser.parse_args()
    generator = random.Random(args.seed)
    pool: list[dict] = []
    folders = sorted(folder for tree in args.trees for folder in tree.iterdir() if folder.is_dir())
    with ThreadPoolExecutor(args.jobs) as pool_of_linters:  # each lint is a process of its own
        linted = list(pool_of_linters.map(lambda folder: lint_repository(folder, args.select), folders))
    for folder, findings in zip(folders, linted):
        kept = generator.sample(findings, min(args.cap, len(findings)))
        pool += [{**finding, "repository": folder.name} for finding in kept]
        print(f"sample_review: {folder.name}: {len(findings)} findings, {len(kept)} kept", file=sys.stderr)
    sample = generator.sample(pool, min(args.size, len(pool)))
    with args.out.open("w", encoding="utf-8") as stream:
        for number, finding in enumerate(sample, 1):
            stream.write(json.dumps({"number": number, **finding}) + "\n")
    codes: dict[str, int] = {}
    for finding in sample:
        codes[finding["code"]] = codes.get(finding["code"], 0) + 1
    print(f"{len(sample)} of {len(pool)} findings in the pool ({len(folders)} repositories) -> {args.out}")
    print("by code: " + ", ".join(f"{code} {count}" for code, count in sorted(codes.items())))


if __name__ == "__main__":
    main()
