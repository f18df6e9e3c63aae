"""Whole programs: the seed situations are reported at the right lines, and good programs give nothing."""

from __future__ import annotations

import re

import pytest

from tests.conftest import FIXTURES, ROOT
from tfdoctor.config import Settings
from tfdoctor.lint.engine import lint_source

PROGRAMS = sorted(p for p in FIXTURES.rglob("*.py")
                  if ".in." not in p.name and ".out." not in p.name and "projects" not in p.relative_to(FIXTURES).parts)


def expected_findings(text: str) -> set[tuple[int, str]]:
    expected = set()
    for number, line in enumerate(text.splitlines(), 1):
        match = re.search(r"# expect: ([A-Z0-9, ]+)$", line)
        if match:
            expected |= {(number, code.strip()) for code in match.group(1).split(",")}
    return expected


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_program_findings_are_exactly_the_expected_ones(program):
    findings = lint_source(program.read_bytes(), str(program), Settings(root=ROOT))
    assert {(f.line, f.code) for f in findings} == expected_findings(program.read_text())


def test_every_seed_situation_is_covered():
    seeds = {p.name for p in (FIXTURES / "seeds").glob("*.py")}
    assert {"yolo_custom_loop.py", "keras_multi_gpu_model.py", "keras_fit_cache_after_prefetch.py"} <= seeds
    assert all(expected_findings((FIXTURES / "seeds" / name).read_text()) for name in seeds)
    assert len(list((FIXTURES / "good").glob("*.py"))) >= 4
