"""Rule pages (Markdown) generated from each rule's docstring and examples."""

from __future__ import annotations

from pathlib import Path

from tfdoctor.lint.rule import DOC_SECTIONS, Rule, all_rules


def render_page(rule: Rule) -> str:
    sections = rule.doc_sections()
    lines = [
        f"# {rule.code}: {rule.name}",
        "",
        f"**Severity:** {rule.severity.value}",
        "",
        "**Test code** (`test_*.py`, `*_test.py`, a `tests/` folder): "
        + ("checked too." if rule.IN_TESTS else "not checked."),
        "",
        *([f"**Off by default:** checked only when selected (`--select {rule.code}`, or `select` in "
           "`[tool.tfdoctor]`).", ""] if rule.OPT_IN else []),
        rule.summary,
        "",
    ]
    for heading in DOC_SECTIONS:
        lines += [f"## {heading}", "", sections.get(heading, ""), ""]
    precedence = precedence_text(rule)
    if precedence:
        lines += ["## When another rule sees the same construct", "", precedence, ""]
    for heading, examples in (("Flagged", rule.INVALID), ("Not flagged", rule.VALID)):
        lines += [f"## {heading}", ""]
        for example in examples:
            lines += ["```python", example.strip("\n"), "```", ""]
    return "\n".join(lines).rstrip("\n") + "\n"


def precedence_text(rule: Rule) -> str:
    """Which rule reports a construct that this one and another both see (`Rule.OUTRANKS`)."""
    winners = [other.code for other in all_rules() if rule.code in other.OUTRANKS and other is not rule]
    losers = [code for code in rule.OUTRANKS if code != rule.code]
    parts = []
    if rule.code in rule.OUTRANKS:
        parts.append("Of this rule's findings on nested constructs, only the innermost is reported.")
    if losers:
        parts.append(f"This rule reports it, and {_codes(losers)} stay{'s' if len(losers) == 1 else ''} "
                     "silent there: this rule is the more specific.")
    if winners:
        parts.append(f"{_codes(winners)} report{'s' if len(winners) == 1 else ''} it, and this rule stays silent "
                     f"there: {'it is' if len(winners) == 1 else 'they are'} more specific.")
    return " ".join(parts)


def _codes(codes) -> str:
    named = [f"[{code}]({code}.md)" for code in codes]
    return named[0] if len(named) == 1 else ", ".join(named[:-1]) + " and " + named[-1]


def write_pages(folder: Path) -> list[Path]:
    """Write one page per rule and an index; returns the paths written."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for rule in all_rules():
        page = folder / f"{rule.code}.md"
        page.write_text(render_page(rule), encoding="utf-8")
        written.append(page)
    index = folder / "README.md"
    index.write_text(render_index(), encoding="utf-8")
    written.append(index)
    return written


def render_table(link_prefix: str = "") -> str:
    """The Markdown table of rules (also pasted in the top-level README, whose test compares it)."""
    lines = ["| code | name | severity | what |", "|---|---|---|---|"]
    for rule in all_rules():
        lines.append(f"| [{rule.code}]({link_prefix}{rule.code}.md) | {rule.name} | {rule.severity.value} | "
                     f"{rule.table_summary()} |")
    return "\n".join(lines) + "\n"


def render_index() -> str:
    return "# tfdoctor rules\n\n" + render_table()
