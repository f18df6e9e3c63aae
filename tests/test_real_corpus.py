"""The corpus scripts' own logic: label matching, the tally, and the rebuild from a local git repository."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


real_corpus = _load("real_corpus")
rebuild = _load("rebuild")
Label, Finding = real_corpus.Label, real_corpus.Finding


def test_a_finding_matches_a_label_inside_its_lines_or_on_its_statement_line():
    labels = [Label("TFD201", 12, "generator"), Label("TFD101", 3, "mgm")]
    findings = [Finding("TFD201", 10, 14, "fit_generator call"), Finding("TFD101", 2, 2, "m", statement_line=3)]
    result = real_corpus.match("o/r", "a.py", labels, findings)
    assert [(lab.code, f.line) for lab, f in result.hits] == [("TFD101", 2), ("TFD201", 10)]
    assert result.false_positives == [] and result.misses == []


def test_a_second_finding_on_one_label_is_a_false_alarm_and_a_wrong_code_does_not_match():
    labels = [Label("TFD201", 5, "gen")]
    findings = [Finding("TFD201", 5, 5, "call"), Finding("TFD201", 5, 6, "argument"), Finding("TFD401", 5, 5, "x")]
    result = real_corpus.match("o/r", "a.py", labels, findings)
    assert len(result.hits) == 1
    assert [(f.code, f.message) for f in result.false_positives] == [("TFD201", "argument"), ("TFD401", "x")]


def test_either_labels_count_neither_way_and_the_tally_counts_every_finding():
    labels = [Label("TFD301", 8, "gate", "either"), Label("TFD301", 20, "loop"), Label("TFD104", 30, "mean")]
    findings = [Finding("TFD301", 8, 8, "a"), Finding("TFD301", 20, 20, "b"), Finding("TFD203", 40, 40, "c")]
    result = real_corpus.match("o/r", "a.py", labels, findings)
    assert [f.line for f in result.ambiguous] == [8]
    assert [lab.line for lab in result.misses] == [30]
    table = real_corpus.tally([result])
    assert (table["TFD301"].findings, table["TFD301"].true_positives, table["TFD301"].false_positives) == (2, 1, 0)
    assert table["TFD104"].recall == 0.0 and table["TFD104"].precision is None
    total = table["total"]
    assert (total.findings, total.true_positives, total.false_positives, total.misses) == (3, 1, 1, 1)
    assert total.precision == 0.5 and total.recall == 0.5


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def test_rebuild_takes_the_project_files_of_the_pinned_commit_from_a_mirror(tmp_path: Path):
    work = tmp_path / "work"
    work.mkdir()
    _git(work, "init", "-q")
    (work / "pkg").mkdir()
    (work / "pkg" / "train.py").write_text("print('v1')\n")
    (work / "requirements-gpu.txt").write_text("tensorflow==2.3\n")
    (work / "README.md").write_text("not kept\n")
    _git(work, "add", ".")
    _git(work, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    pinned = _git(work, "rev-parse", "HEAD")
    (work / "pkg" / "train.py").write_text("print('v2')\n")
    _git(work, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "two")
    mirrors = tmp_path / "mirrors"
    _git(tmp_path, "clone", "-q", "--bare", str(work), str(mirrors / "own+proj" / "repo"))
    manifest = tmp_path / "m.json"
    manifest.write_text(json.dumps({"version": 1, "repos": [{"repo": "own/proj", "commit": pinned, "why": ""},
                                                           {"repo": "own/gone", "commit": pinned, "why": ""}],
                                    "files": []}))
    dest = tmp_path / "dest"
    url = f"file://{tmp_path}/nowhere/{{repo}}"
    args = ["--manifest", str(manifest), "--dest", str(dest), "--mirrors", str(mirrors), "--github-url", url]
    assert rebuild.main(args) == 1  # own/gone cannot be had
    project = dest / "own__proj"
    assert (project / "pkg" / "train.py").read_text() == "print('v1')\n"
    assert (project / "requirements-gpu.txt").is_file() and not (project / "README.md").exists()
    assert sorted(p.name for p in dest.iterdir()) == ["own__proj"]
    assert rebuild.rebuild_one(rebuild.RepoPin("own/proj", pinned), dest, mirrors, url) == "up to date"


def test_rebuild_clones_when_there_is_no_mirror(tmp_path: Path):
    origin = tmp_path / "remote" / "own" / "proj"
    origin.mkdir(parents=True)
    _git(origin, "init", "-q")
    _git(origin, "config", "uploadpack.allowFilter", "true")
    (origin / "setup.cfg").write_text("[metadata]\n")
    (origin / "data.bin").write_bytes(b"\0" * 10)
    _git(origin, "add", ".")
    _git(origin, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    pin = rebuild.RepoPin("own/proj", _git(origin, "rev-parse", "HEAD"))
    dest = tmp_path / "dest"
    done = rebuild.rebuild_one(pin, dest, tmp_path / "no-mirrors", f"file://{tmp_path}/remote/{{repo}}")
    assert done == "1 files from a clone"
    assert sorted(p.name for p in (dest / "own__proj").iterdir()) == [".corpus_commit", ".git", "setup.cfg"]
    assert not any((dest / "own__proj" / ".git").iterdir())  # a checkout's marker, empty: the root is found there


def test_a_repository_pinned_to_two_commits_is_an_error(tmp_path: Path):
    one, two = tmp_path / "a.json", tmp_path / "b.json"
    one.write_text(json.dumps({"repos": [{"repo": "o/r", "commit": "1" * 40}]}))
    two.write_text(json.dumps({"repos": [{"repo": "o/r", "commit": "2" * 40}]}))
    with pytest.raises(rebuild.RebuildError, match="o/r is pinned"):
        rebuild.read_pins([one, two])


def test_a_label_of_a_split_off_rule_meets_that_rules_findings(tmp_path: Path):
    """A newer corpus labels TFD114 (split off TFD106); findings of either code are counted as TFD106, and so is
    the label: the opt-in rule's finding is its hit."""
    manifest = tmp_path / "m.json"
    manifest.write_text(json.dumps({"version": 1, "repos": [], "files": [
        {"repo": "o/r", "path": "a.py", "labels": [{"code": "TFD114", "line": 7, "note": "batch(64)"}]}]}))
    [labelled] = real_corpus.read_manifests([manifest])
    result = real_corpus.match("o/r", "a.py", list(labelled.labels), [Finding("TFD106", 7, 7, "batch")])
    assert [lab.code for lab, _ in result.hits] == ["TFD106"] and result.misses == []
