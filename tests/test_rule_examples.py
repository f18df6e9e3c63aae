"""Every rule's examples are its tests: INVALID lines marked `# TFDnnn` must be reported, exactly;
VALID examples must give no finding of that rule. The docstring's Example / Use instead count too."""

from __future__ import annotations

import re

import pytest

from tests.conftest import lint_text
from tfdoctor.lint.rule import DOC_SECTIONS, all_rules

RULES = all_rules()


def _cases(kind: str):
    for rule in RULES:
        examples = list(rule.INVALID if kind == "invalid" else rule.VALID)
        examples.append(rule.doc_code("Example" if kind == "invalid" else "Use instead"))
        for index, example in enumerate(examples):
            yield pytest.param(rule, example, id=f"{rule.code}-{kind}-{index}")


def _targets(code: str) -> dict[str, str]:
    """`# tfdoctor: target-keras=2.15 target-tensorflow=1.12` on an example's first line."""
    first = code.split("\n", 1)[0]
    return dict(re.findall(r"target-(keras|tensorflow)=(\S+)", first)) if first.startswith("# tfdoctor:") else {}


def _marked_lines(code: str, rule_code: str) -> set[int]:
    return {n for n, line in enumerate(code.splitlines(), 1) if re.search(rf"#.*\b{rule_code}\b", line)}


@pytest.mark.parametrize(("rule", "example"), list(_cases("invalid")))
def test_invalid_examples_are_reported_on_marked_lines(rule, example):
    expected = _marked_lines(example, rule.code)
    assert expected, "an INVALID example must mark the lines it expects"
    found = {f.line for f in lint_text(example, select=(rule.code,), **_targets(example)) if f.code == rule.code}
    assert found == expected


@pytest.mark.parametrize(("rule", "example"), list(_cases("valid")))
def test_valid_examples_are_not_reported(rule, example):
    findings = lint_text(example, select=(rule.code,), **_targets(example))
    assert [f for f in findings if f.code == rule.code] == []


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.code)
def test_rule_is_documented(rule):
    sections = rule.doc_sections()
    assert list(sections) == list(DOC_SECTIONS)
    assert all(sections.values())
    assert re.fullmatch(r"TFD\d{3}", rule.code) and re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", rule.name)
    assert len(rule.INVALID) >= 2 and len(rule.VALID) >= 2


def test_codes_and_names_are_unique():
    assert len({r.code for r in RULES}) == len(RULES)
    assert len({r.name for r in RULES}) == len(RULES)
