"""Precision and recall of `tfdoctor lint` on the hand-labelled files of the development corpus.

Lints every labelled file of the manifests with the real CLI (`python -m tfdoctor lint --format json
--no-cache --exit-zero --select TFD`: every rule, the opt-in ones too, since a label is a problem whichever
rules a user selects; no target pinned: the linter decides the version itself) inside the corpus that
`benchmarks/rebuild.py` wrote, counts every finding of every code on those files, and prints precision and
recall per code and in total, then every false positive and every miss. A finding matches a label of the
same code when the label's line lies within the finding's line..end_line or equals its statement line. A
label with `"verdict": "either"` is an honestly ambiguous case: a finding on it counts neither as a hit nor
as a false alarm, and no finding there is no miss. Usage:

    python benchmarks/real_corpus.py [--manifest M.json ...] [--corpus /work/corpus/files] [--json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_CORPUS = Path("/work/corpus/files")
EITHER = "either"
# Rules split off a labelled rule after the labels were written: their findings answer that rule's labels (the
# problem labelled is the same construct; the split only decides which part runs by default). A label written
# with the split-off code (a later corpus) is counted under the older code too, so that the two meet.
SPLIT_FROM = {"TFD113": "TFD101", "TFD114": "TFD106"}


@dataclass(frozen=True)
class Label:
    """One finding a correct linter reports (or, with verdict either, may report)."""

    code: str
    line: int
    note: str
    verdict: str = "yes"


@dataclass(frozen=True)
class Finding:
    """One finding of the linter, as its JSON output gives it."""

    code: str
    line: int
    end_line: int
    message: str
    statement_line: int = 0

    def covers(self, line: int) -> bool:
        """Whether a label on this line is this finding's."""
        return self.line <= line <= max(self.end_line, self.line) or line == self.statement_line


@dataclass
class FileResult:
    """The matching of one file's findings against its labels."""

    repo: str
    path: str
    hits: list[tuple[Label, Finding]] = field(default_factory=list)
    false_positives: list[Finding] = field(default_factory=list)
    misses: list[Label] = field(default_factory=list)
    ambiguous: list[Finding] = field(default_factory=list)


@dataclass
class Tally:
    """Counts for one code (or for all)."""

    labels: int = 0  # definite labels (an "either" label is not counted)
    findings: int = 0  # every finding of the code, ambiguous ones included
    true_positives: int = 0
    false_positives: int = 0
    misses: int = 0

    @property
    def precision(self) -> float | None:
        judged = self.true_positives + self.false_positives
        return self.true_positives / judged if judged else None

    @property
    def recall(self) -> float | None:
        expected = self.true_positives + self.misses
        return self.true_positives / expected if expected else None


def match(repo: str, path: str, labels: list[Label], findings: list[Finding]) -> FileResult:
    """Pairs findings with labels of the same code, each label with at most one finding."""
    result = FileResult(repo, path)
    open_labels = list(labels)
    for finding in sorted(findings, key=lambda f: (f.line, f.code)):
        label = next((lab for lab in open_labels if lab.code == finding.code and finding.covers(lab.line)), None)
        if label is None:
            already = any(lab.code == finding.code and finding.covers(lab.line) for lab in labels)
            # A second finding on a label already matched is a duplicate report of one smell: a false alarm,
            # unless that label is an ambiguous one.
            ambiguous = already and any(lab.verdict == EITHER and lab.code == finding.code
                                        and finding.covers(lab.line) for lab in labels)
            (result.ambiguous if ambiguous else result.false_positives).append(finding)
            continue
        open_labels.remove(label)
        if label.verdict == EITHER:
            result.ambiguous.append(finding)
        else:
            result.hits.append((label, finding))
    result.misses = [lab for lab in open_labels if lab.verdict != EITHER]
    return result


def tally(results: list[FileResult]) -> dict[str, Tally]:
    """Per code, and under "total", over every file."""
    table: dict[str, Tally] = defaultdict(Tally)
    for result in results:
        for label, _ in result.hits:
            table[label.code].true_positives += 1
        for finding in result.false_positives:
            table[finding.code].false_positives += 1
        for label in result.misses:
            table[label.code].misses += 1
        for finding in [f for _, f in result.hits] + result.false_positives + result.ambiguous:
            table[finding.code].findings += 1
    for counts in table.values():
        counts.labels = counts.true_positives + counts.misses
    total = Tally()
    for counts in table.values():
        for name in ("labels", "findings", "true_positives", "false_positives", "misses"):
            setattr(total, name, getattr(total, name) + getattr(counts, name))
    table["total"] = total
    return dict(table)


@dataclass(frozen=True)
class LabelledFile:
    """One labelled file of a manifest."""

    repo: str
    path: str
    era: str
    labels: tuple[Label, ...]

    @property
    def folder(self) -> str:
        return self.repo.replace("/", "__")


def read_manifests(manifests: list[Path]) -> list[LabelledFile]:
    """The labelled files of every manifest."""
    files = []
    for manifest in manifests:
        data = json.loads(manifest.read_text())
        for entry in data["files"]:
            labels = tuple(Label(SPLIT_FROM.get(lab["code"], lab["code"]), int(lab["line"]), lab.get("note", ""),
                                 lab.get("verdict", "yes")) for lab in entry["labels"])
            files.append(LabelledFile(entry["repo"], entry["path"], entry.get("era", ""), labels))
    return files


def lint(paths: list[Path]) -> dict[Path, list[Finding]]:
    """Runs the real CLI once over the given files; findings by resolved path."""
    command = [sys.executable, "-m", "tfdoctor", "lint", "--format", "json", "--no-cache", "--exit-zero",
               "--select", "TFD", *map(str, paths)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        last = done.stderr.strip().splitlines()
        raise RuntimeError(f"tfdoctor lint failed ({done.returncode}): {last[-1] if last else ''}")
    found: dict[Path, list[Finding]] = defaultdict(list)
    for item in json.loads(done.stdout)["findings"]:
        found[Path(item["path"]).resolve()].append(Finding(
            SPLIT_FROM.get(item["code"], item["code"]), int(item["line"]), int(item.get("end_line") or item["line"]), item["message"],
            int(item.get("statement_line") or 0)))
    return found


def evaluate(files: list[LabelledFile], corpus: Path) -> tuple[list[FileResult], list[str]]:
    """Lints the labelled files repository by repository; returns the matches and the files missing."""
    missing = [f"{f.folder}/{f.path}" for f in files if not (corpus / f.folder / f.path).is_file()]
    present = [f for f in files if (corpus / f.folder / f.path).is_file()]
    by_repo: dict[str, list[LabelledFile]] = defaultdict(list)
    for item in present:
        by_repo[item.repo].append(item)
    results = []
    for repo, items in by_repo.items():
        paths = [(corpus / item.folder / item.path).resolve() for item in items]
        found = lint(sorted(set(paths)))
        for item, path in zip(items, paths):
            results.append(match(repo, item.path, list(item.labels), found.get(path, [])))
    return results, missing


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def render(results: list[FileResult], missing: list[str]) -> str:
    """The table, then every false positive and every miss."""
    table = tally(results)
    lines = [f"{len(results)} files from {len({r.repo for r in results})} repositories "
             "(labels: definite ones; found: every finding; fp: findings on no label of their code)",
             f"{'code':<8} {'labels':>6} {'found':>6} {'tp':>4} {'fp':>4} {'miss':>5} {'prec':>5} {'recall':>6}"]
    for code in sorted(c for c in table if c != "total") + ["total"]:
        t = table[code]
        lines.append(f"{code:<8} {t.labels:>6} {t.findings:>6} {t.true_positives:>4} {t.false_positives:>4} "
                     f"{t.misses:>5} {_ratio(t.precision):>5} {_ratio(t.recall):>6}")
    lines.append("")
    lines.append("False positives:")
    for result in results:
        for finding in result.false_positives:
            lines.append(f"  {result.repo}/{result.path}:{finding.line} {finding.code} {finding.message}")
    lines.append("Misses:")
    for result in results:
        for label in result.misses:
            lines.append(f"  {result.repo}/{result.path}:{label.line} {label.code} {label.note}")
    if missing:
        lines.append("Not in the corpus (run benchmarks/rebuild.py):")
        lines.extend(f"  {path}" for path in missing)
    return "\n".join(lines)


def as_json(results: list[FileResult], missing: list[str]) -> str:
    """Machine-readable: the table and every file's matches."""
    table = {code: {**asdict(t), "precision": t.precision, "recall": t.recall} for code, t in tally(results).items()}
    files = [{"repo": r.repo, "path": r.path,
              "hits": [{"label": asdict(lab), "finding": asdict(f)} for lab, f in r.hits],
              "false_positives": [asdict(f) for f in r.false_positives],
              "misses": [asdict(lab) for lab in r.misses],
              "ambiguous": [asdict(f) for f in r.ambiguous]} for r in results]
    return json.dumps({"table": table, "files": files, "missing": missing}, indent=2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--manifest", action="append", type=Path,
                        help="a corpus manifest (repeatable; default: every benchmarks/corpus/*.json)")
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS,
                        help=f"the folder benchmarks/rebuild.py wrote ({DEFAULT_CORPUS})")
    parser.add_argument("--json", action="store_true", help="print JSON instead of the table")
    args = parser.parse_args(argv)
    manifests = args.manifest or sorted((HERE / "corpus").glob("*.json"))
    try:
        files = read_manifests(manifests)
        results, missing = evaluate(files, args.corpus)
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        print(f"real_corpus: {exc}", file=sys.stderr)
        return 2
    print(as_json(results, missing) if args.json else render(results, missing))
    return 0


if __name__ == "__main__":
    sys.exit(main())
