"""The rule pages in rules/ are generated from the rules; a stale page fails."""

from __future__ import annotations

from tests.conftest import ROOT, run_cli
from tfdoctor.lint.rule import all_rules


def test_rule_pages_are_up_to_date(tmp_path):
    result = run_cli("rules", "--write-docs", str(tmp_path))
    assert result.returncode == 0, result.stderr
    generated = {p.name: p.read_text() for p in tmp_path.iterdir()}
    committed = {p.name: p.read_text() for p in (ROOT / "rules").iterdir()}
    assert set(generated) == {f"{r.code}.md" for r in all_rules()} | {"README.md"}
    stale = sorted(name for name in generated if committed.get(name) != generated[name])
    assert not stale, f"run 'tfdoctor rules --write-docs rules/': stale {stale}"
    assert set(committed) == set(generated)


def test_readme_rule_table_and_test_command_are_current():
    from tfdoctor.lint.docs import render_table

    readme = (ROOT / "README.md").read_text()
    assert render_table("rules/") in readme, "paste render_table('rules/') into README.md"
    ci = (ROOT / ".ci" / "run").read_text()
    test_command = ci.strip().splitlines()[-1]
    assert "```bash\n# Install everything" in readme and test_command in readme
