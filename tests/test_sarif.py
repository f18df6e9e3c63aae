"""`--format sarif` validates against the SARIF 2.1.0 schema and carries every rule's page."""

from __future__ import annotations

import json

import jsonschema
import pytest

from tests.conftest import FIXTURES, ROOT, run_cli
from tfdoctor.lint.docs import render_page
from tfdoctor.lint.rule import all_rules

# The copy of the schema keeps its root object under definitions/Root, so validating against the file as it
# stands would accept anything: validate against that definition.
_SCHEMA = json.loads((ROOT / "tests" / "data" / "sarif-schema-2.1.0.json").read_text())
VALIDATOR = jsonschema.Draft7Validator({"$ref": "#/definitions/Root", "definitions": _SCHEMA["definitions"]})


@pytest.fixture(scope="module")
def sarif(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sarif")
    (folder / "syntax.py").write_text("import tensorflow as tf\ndef f(:\n")
    result = run_cli("lint", "--no-cache", "--format", "sarif", "fixtures/seeds", str(FIXTURES / "notebooks"),
                     str(folder), "fixtures/good")
    assert result.returncode == 1, result.stderr
    return json.loads(result.stdout)


def test_validates_against_the_schema(sarif):
    VALIDATOR.validate(sarif)
    assert not VALIDATOR.is_valid({"version": "2.1.0"}) and not VALIDATOR.is_valid({**sarif, "extra": 1})


def test_every_rule_with_its_page_and_level(sarif):
    (run,) = sarif["runs"]
    rules = run["tool"]["driver"]["rules"]
    assert [r["id"] for r in rules] == [r.code for r in all_rules()]
    for entry, rule in zip(rules, all_rules()):
        assert entry["help"]["markdown"] == render_page(rule) and entry["name"] == rule.name
        assert entry["defaultConfiguration"]["level"] == {"error": "error", "warning": "warning", "info": "note"}[rule.severity.value]


def test_results_point_at_findings(sarif):
    results = sarif["runs"][0]["results"]
    rules = sarif["runs"][0]["tool"]["driver"]["rules"]
    assert all(rules[r["ruleIndex"]]["id"] == r["ruleId"] for r in results)
    assert {r["level"] for r in results} <= {"error", "warning", "note"}
    parse_error = next(r for r in results if r["ruleId"] == "TFD000")
    assert parse_error["locations"][0]["physicalLocation"]["region"]["startLine"] == 2
    relative = [r for r in results if r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"].startswith("fixtures/")]
    assert relative and all(r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"].startswith("file:///")
                            for r in results if r not in relative)
    in_cells = [r for r in results if "cell" in r["properties"]]
    assert in_cells and all(r["message"]["text"].startswith(f"cell {r['properties']['cell']}: ") for r in in_cells)
