"""Engine properties: it never raises on any input, parallel runs report exactly what serial runs do, a
dying worker is one error line, and the prefilter parses only files that mention the rules' words."""

from __future__ import annotations

import os

import hypothesmith
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from tests.conftest import FIXTURES, ROOT
from tfdoctor.config import Settings
from tfdoctor.lint import engine, parallel
from tfdoctor.lint.engine import lint_paths, lint_source
from tfdoctor.lint.findings import Finding
from tfdoctor.lint.rule import all_rules

SETTINGS = Settings(root=ROOT)
PRELUDE = "import tensorflow as tf\nstrategy = tf.distribute.MirroredStrategy()\n"
EXAMPLE_LINES = sorted({line for rule in all_rules() for example in (*rule.INVALID, *rule.VALID)
                        for line in example.splitlines()})
pytestmark = pytest.mark.filterwarnings("ignore::SyntaxWarning")  # hypothesmith compiles odd but legal code
QUICK = settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))


def _never_raises(source: bytes) -> None:
    findings = lint_source(source, "generated.py", SETTINGS)
    assert all(isinstance(f, Finding) and f.line >= 1 and f.column >= 1 for f in findings)


@QUICK
@given(hypothesmith.from_grammar())
def test_any_grammatical_program(program):
    _never_raises((PRELUDE + program).encode())


@settings(QUICK, max_examples=10)  # generating CST nodes is slow: about a second each
@given(hypothesmith.from_node())
def test_any_libcst_generated_program(program):
    _never_raises((PRELUDE + program).encode())


@QUICK
@given(st.lists(st.sampled_from(EXAMPLE_LINES), max_size=30))
def test_any_mix_of_rule_example_lines(lines):
    _never_raises((PRELUDE + "\n".join(lines) + "\n").encode())


@QUICK
@given(st.binary(max_size=300))
def test_any_bytes(data):
    _never_raises(b"tensorflow\n" + data)


def test_parallel_report_equals_serial(monkeypatch):
    monkeypatch.setattr(parallel, "MIN_POOL_BYTES", 0)
    paths = [str(FIXTURES), str(ROOT / "tfdoctor" / "rules")]
    serial = lint_paths(paths, jobs=1)
    pooled = lint_paths(paths, jobs=2)
    assert (pooled.files, pooled.skipped, pooled.errors) == (serial.files, serial.skipped, serial.errors)
    assert pooled.findings == serial.findings and serial.findings


def test_worker_errors_are_one_line_each(monkeypatch, tmp_path):
    for name in ("a.py", "b.py", "c.py"):
        (tmp_path / name).write_text("import tensorflow as tf\nstrategy.run(f)\n")
    monkeypatch.setattr(parallel, "MIN_POOL_BYTES", 0)

    def bug(*args, **kwargs):
        raise KeyError("boom")

    monkeypatch.setattr(engine, "lint_source", bug)
    report = lint_paths([str(tmp_path)], jobs=2)
    assert report.errors == [f"{tmp_path / n}: internal error: KeyError: 'boom' (please report)" for n in ("a.py", "b.py", "c.py")]
    monkeypatch.setattr(engine, "lint_source", lambda *args, **kwargs: os._exit(3))
    report = lint_paths([str(tmp_path)], jobs=2)
    assert len(report.errors) == 3 and all("exited unexpectedly" in e and "\n" not in e for e in report.errors)


def test_prefilter_parses_only_files_with_the_rules_words(tmp_path):
    (tmp_path / "torch_train.py").write_text("import torch\nmodel.fit(batches())\nfor b in loader:\n    run(b)\n")
    (tmp_path / "helpers.py").write_text("def split(x):\n    return x[:2]\n")
    (tmp_path / "uses_strategy.py").write_text("def step(strategy, batch):\n    return strategy.run(fn, args=(batch,))\n")
    (tmp_path / "tf_train.py").write_text("import tensorflow as tf\nprint(tf.__version__)\n")
    report = lint_paths([str(tmp_path)])
    assert (report.files, report.skipped) == (4, 2)
