"""A judged review sample re-linted with today's linter: which of its findings are still reported, and the
useful share and precision of those.

A finding is still reported when a finding of the same code lies on the same line of the same file (and
cell, for a notebook, where the verdicts record it). Run from the repository root (it imports
`sample_review` beside it). Findings that are new since the sample was drawn have no verdict and are only
counted: judging them needs a new review. Usage:

    python benchmarks/relint_review.py benchmarks/reviews/review20_verdicts.json /work/review20/tree [--json]
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

from sample_review import lint_repository


def still_reported(verdicts: dict, tree: Path) -> tuple[list[dict], list[dict], int]:
    """(the judged findings still reported, those no longer reported, the findings without a verdict) over
    the repositories of the sample."""
    current: dict[str, list[dict]] = {}
    for repository in sorted({f["repository"] for f in verdicts["findings"]}):
        current[repository] = lint_repository(tree / repository)
    kept, gone, matched = [], [], set()
    for judged in verdicts["findings"]:
        found = [f for f in current[judged["repository"]] if f["code"] == judged["code"]
                 and f["line"] == judged["line"] and ("cell" not in judged or f.get("cell") == judged["cell"])
                 and f["path"].endswith("/" + judged["path"])]
        (kept if found else gone).append(judged)
        matched.update(id(f) for f in found)
    unjudged = sum(1 for findings in current.values() for f in findings if id(f) not in matched)
    return kept, gone, unjudged


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("verdicts", type=Path)
    parser.add_argument("tree", type=Path)
    parser.add_argument("--json", action="store_true", help="print the counts as JSON")
    args = parser.parse_args()
    kept, gone, unjudged = still_reported(json.loads(args.verdicts.read_text()), args.tree)
    counts = Counter(f["verdict"] for f in kept)
    total = sum(counts.values())
    summary = {"still_reported": dict(counts), "of": total, "no_longer_reported": len(gone),
               "useful_share": round(counts["useful"] / total, 3) if total else None,
               "precision": round(1 - counts["wrong"] / total, 3) if total else None,
               "findings_without_verdict": unjudged}
    if args.json:
        print(json.dumps(summary))
        return
    print(f"still reported: {dict(counts)} of {total}; useful {summary['useful_share']}, "
          f"precision {summary['precision']}; {unjudged} other findings in these repositories have no verdict")
    print(f"no longer reported ({len(gone)}):")
    for judged in gone:
        print(f"  #{judged['number']} {judged['code']} {judged['repository']}/{judged['path']}:{judged['line']} "
              f"({judged['verdict']})")


if __name__ == "__main__":
    main()
