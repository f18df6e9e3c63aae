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
        rule.summary,
        "",
    ]
    for heading in DOC_SECTIONS:
        lines += [f"## {heading}", "", sections.get(heading, ""), ""]
    for heading, examples in (("Flagged", rule.INVALID), ("Not flagged", rule.VALID)):
        lines += [f"## {heading}", ""]
        for example in examples:
            lines += ["```python", example.strip("\n"), "```", ""]
    return "\n".join(lines).rstrip("\n") + "\n"


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
        lines.append(f"| [{rule.code}]({link_prefix}{rule.code}.md) | {rule.name} | {rule.severity.value} | {rule.summary} |")
    return "\n".join(lines) + "\n"


def render_index() -> str:
    return "# tfdoctor rules\n\n" + render_table()
