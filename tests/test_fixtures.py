"""Whole programs: the seed situations are reported at the right lines, and good programs give nothing.

A line that must be reported ends with `# expect: CODE[, CODE]`. In a multi-file project under
`fixtures/projects/` (each with a marker file, so it is its own project), a code may name where its
evidence lies in another file: `# expect: TFD104 (losses.py:8)`.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import DEPTH_MEASURED, FIXTURES, ROOT
from tfdoctor.config import Settings
from tfdoctor.lint.engine import lint_paths, lint_source

PROJECTS = sorted(p for p in (FIXTURES / "projects").iterdir() if p.is_dir())
PROGRAMS = sorted(p for p in FIXTURES.rglob("*.py")
                  if ".in." not in p.name and ".out." not in p.name and "projects" not in p.relative_to(FIXTURES).parts)
# `TFD202 (data.py:14)`: its evidence lies there; `TFD202 (at data.py:14)`: what it is about lies there
_ITEM = re.compile(r"(TFD\d+|[A-Z]+\d+)(?: \((at )?([^():]+):(\d+)\))?")


def expectations(text: str) -> dict[tuple[int, str], tuple[str, int, bool] | None]:
    """(line, code) -> where its evidence lies in another file, and whether that is its subject (None:
    nowhere else)."""
    expected: dict[tuple[int, str], tuple[str, int, bool] | None] = {}
    for number, line in enumerate(text.splitlines(), 1):
        match = re.search(r"# expect: (.+)$", line)
        if match:
            for item in _ITEM.finditer(match.group(1)):
                code, subject, path, where = item.groups()
                expected[(number, code)] = (path, int(where), bool(subject)) if path else None
    return expected


def expected_findings(text: str) -> set[tuple[int, str]]:
    return set(expectations(text))


@pytest.mark.parametrize("program", [pytest.param(p, marks=DEPTH_MEASURED) if p.parent.name == "crashes" else p
                                     for p in PROGRAMS], ids=lambda p: str(p.relative_to(FIXTURES)))
def test_program_findings_are_exactly_the_expected_ones(program):
    findings = lint_source(program.read_bytes(), str(program), Settings(root=ROOT, select=("TFD",)))  # opt-in too
    assert {(f.line, f.code) for f in findings} == expected_findings(program.read_text())


@pytest.mark.parametrize("project", PROJECTS, ids=lambda p: p.name)
def test_project_findings_and_their_evidence(project: Path, monkeypatch: pytest.MonkeyPatch):
    """Linting the whole project, and each file alone: the same findings, each with its evidence, except
    that in the whole project a finding standing on a call that brings in another file's construct gives
    way to that file's own finding on it."""
    monkeypatch.chdir(project)
    files = sorted(p.relative_to(project) for p in project.rglob("*.py"))
    expected = {(str(f), line, code): where for f in files
                for (line, code), where in expectations(f.read_text()).items()}
    assert expected, "a project fixture must expect at least one finding"
    for paths in (["."], *([str(f)] for f in files)):
        report = lint_paths(paths)
        assert not report.errors
        found = {(f.path, f.line, f.code): tuple((r.path, r.line, r.subject) for r in f.related)
                 for f in report.findings}
        wanted = {key: ((where,) if where else ()) for key, where in expected.items() if key[0] in paths or paths == ["."]}
        if paths == ["."]:
            wanted = {key: where for key, where in wanted.items()
                      if not (where and where[0][2] and (where[0][0], where[0][1], key[2]) in wanted)}
        assert found == wanted


def test_every_seed_situation_is_covered():
    seeds = {p.name for p in (FIXTURES / "seeds").glob("*.py")}
    assert {"yolo_custom_loop.py", "keras_multi_gpu_model.py", "keras_fit_cache_after_prefetch.py"} <= seeds
    assert all(expected_findings((FIXTURES / "seeds" / name).read_text()) for name in seeds)
    assert len(list((FIXTURES / "good").glob("*.py"))) >= 4
