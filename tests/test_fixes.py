"""Fixes: the fixture pairs, their properties, and how `--fix`/`--diff` treat the user's files."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import libcst as cst
import pytest

from tests.conftest import FIXTURES, ROOT, run_cli
from tfdoctor.config import Settings
from tfdoctor.lint.engine import lint_source
from tfdoctor.lint.fixes import FixError, write_atomically
from tfdoctor.lint.versions import Target
from tfdoctor.lint.source_fixes import fix_source

PAIRS = sorted(FIXTURES.glob("fixes/*.in.py"))


# Before TF 2.12 nothing injects a prefetch, so TFD203 reports a pipeline without one and its fix appends it
SETTINGS = Settings(root=ROOT, explicit_tensorflow=Target((2, 11), "test"))


def _fix(path: Path, source: bytes):
    return fix_source(source, str(path), SETTINGS.for_file(path, source), path, unsafe=".unsafe." in path.name)


@pytest.mark.parametrize("before", PAIRS, ids=lambda p: p.name)
def test_fix_fixture_pairs(before):
    after = before.with_name(before.name.replace(".in.py", ".out.py"))
    result = _fix(before, before.read_bytes())
    assert result.fixed, "a fixture pair must exercise at least one fix"
    assert result.text.decode() == after.read_text()
    cst.parse_module(result.text)  # the result parses
    assert _fix(before, result.text).text == result.text  # a second --fix changes nothing
    fixed_settings = SETTINGS.for_file(after, result.text)
    remaining = Counter(f.code for f in lint_source(result.text, str(after), fixed_settings, after))
    original = Counter(f.code for f in lint_source(before.read_bytes(), str(before), SETTINGS.for_file(before), before))
    fixed = Counter(f.code for f in result.fixed)
    assert not remaining - original  # no new findings
    assert all(remaining[code] <= original[code] - count for code, count in fixed.items())  # fixed ones gone


def test_fix_writes_changed_files_only_and_reports(tmp_path):
    for pair in PAIRS:
        (tmp_path / pair.name).write_bytes(pair.read_bytes())
    untouched = tmp_path / "good.py"
    untouched.write_text("import tensorflow as tf\nx = tf.constant(1)\n")
    os.utime(untouched, (1_000_000, 1_000_000))
    result = run_cli("lint", "--fix", "--no-cache", "--format", "concise", "--target-tensorflow", "2.11", str(tmp_path))
    assert "fixed " in result.stderr and "TFD202 add num_parallel_calls=AUTOTUNE" in result.stderr
    assert untouched.stat().st_mtime == 1_000_000
    for pair in PAIRS:
        expected = pair.with_name(pair.name.replace(".in.py", ".out.py")).read_text()
        fixed = (tmp_path / pair.name).read_text()
        assert (fixed == expected) is (".unsafe." not in pair.name)  # unsafe fixes need --unsafe-fixes
    assert not list(tmp_path.glob(".*.tfdoctor-fix"))  # no temporary files left behind


def test_unsafe_fixes_and_diff_write_nothing(tmp_path):
    target = tmp_path / "train.py"
    source = (FIXTURES / "fixes" / "cache_after_prefetch.unsafe.in.py").read_bytes()
    target.write_bytes(source)
    diff = run_cli("lint", "--diff", "--unsafe-fixes", "--no-cache", str(target))
    assert diff.returncode == 1
    assert "+    .cache()" in diff.stdout and "-    .cache()" in diff.stdout
    assert target.read_bytes() == source
    fixed = run_cli("lint", "--fix", "--unsafe-fixes", "--no-cache", str(target))
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert target.read_text() == (FIXTURES / "fixes" / "cache_after_prefetch.unsafe.out.py").read_text()


def test_fix_keeps_encoding_and_mode(tmp_path):
    target = tmp_path / "latin.py"
    text = ("# -*- coding: latin-1 -*-\nimport tensorflow as tf\nstrategy = tf.distribute.MirroredStrategy()\n# café\n"
            "ds = tf.data.Dataset.range(8).map(lambda x: tf.strings.as_string(tf.random.shuffle(x))).shuffle(4).batch(2)\n"
            "model.fit(ds)\n")
    target.write_bytes(text.encode("latin-1"))
    target.chmod(0o640)
    assert run_cli("lint", "--fix", "--no-cache", "--target-tensorflow", "2.11", str(target)).returncode in (0, 1)
    fixed = target.read_bytes().decode("latin-1")
    assert "café" in fixed and "num_parallel_calls=tf.data.AUTOTUNE" in fixed and ".prefetch(tf.data.AUTOTUNE)" in fixed
    assert (target.stat().st_mode & 0o777) == 0o640


def test_read_only_and_changed_files_are_left_intact(tmp_path):
    target = tmp_path / "train.py"
    original = b"import tensorflow as tf\nds = tf.data.Dataset.range(8).map(f).batch(2)\nmodel.fit(ds)\n"
    target.write_bytes(original)
    with pytest.raises(FixError, match="changed while being fixed"):
        write_atomically(target, b"new", original + b"# edited meanwhile\n")
    assert target.read_bytes() == original
    if os.geteuid() != 0:  # root may write anything
        target.chmod(0o444)
        result = run_cli("lint", "--fix", "--no-cache", str(target))
        assert result.returncode == 2 and "read-only; not fixed" in result.stderr
        assert target.read_bytes() == original
    else:
        target.chmod(0o444)
        os_access = os.access
        try:
            os.access = lambda *_args, **_kwargs: False  # type: ignore[assignment]
            with pytest.raises(FixError, match="read-only"):
                write_atomically(target, b"new", original)
        finally:
            os.access = os_access  # type: ignore[assignment]
        assert target.read_bytes() == original


def test_fix_on_unparsable_file_changes_nothing(tmp_path):
    target = tmp_path / "broken.py"
    target.write_text("import tensorflow as tf\ndef f(:\n")
    result = run_cli("lint", "--fix", "--no-cache", "--format", "concise", str(target))
    assert result.returncode == 1 and "TFD000" in result.stdout
    assert target.read_text() == "import tensorflow as tf\ndef f(:\n"


def test_fix_from_stdin_prints_the_fixed_source():
    result = run_cli("lint", "--fix", "--target-keras", "3", "-", stdin="import tensorflow as tf\nmodel.fit_generator(g)\n")
    assert result.returncode == 0 and result.stdout == "import tensorflow as tf\nmodel.fit(g)\n"


VERSIONS = FIXTURES / "versions" / "keras_versions.py"


@pytest.mark.parametrize(("keras", "expected"), [
    ("2", {"TFD104": "classification_loss(labels"}),  # TFD401: `fit_generator` runs under Keras 2
    ("3.5", {"TFD104": "classification_loss(labels", "TFD304": "apply_gradients", "TFD401": "fit_generator",
             "TFD403": "get_unscaled_gradients"}),
    ("3.15", {"TFD304": "apply_gradients", "TFD401": "fit_generator", "TFD402": "box_loss(boxes",
              "TFD403": "get_unscaled_gradients"}),
])
def test_version_dependent_rules_follow_the_target(keras, expected):
    import json

    result = run_cli("lint", "--no-cache", "--format", "json", "--target-keras", keras, str(VERSIONS))
    findings = json.loads(result.stdout)["findings"]
    lines = VERSIONS.read_text().splitlines()
    got = {f["code"]: lines[f["line"] - 1] for f in findings if f["code"] != "TFD201"}  # TFD201: any version
    assert set(got) == set(expected)
    for code, text in expected.items():
        assert text in got[code]
    severity = {f["code"]: f["severity"] for f in findings}
    assert severity.get("TFD401") == (None if keras == "2" else "error")
    assert all(f"Keras {keras}" in f["message"] for f in findings if f["code"] in ("TFD104", "TFD304", "TFD402",
                                                                                 "TFD403", "TFD401"))


def test_nested_fixes_all_land_in_one_run():
    """Each `interleave` of a chain lies inside the next, so one pass fixes only the outermost: a chain
    longer than the pass bound of old still comes out fully fixed, and fixing again changes nothing."""
    chain = "".join(f"\n    .interleave(read_{i})" for i in range(25))
    source = ("import tensorflow as tf\nstrategy = tf.distribute.MirroredStrategy()\n"
              f"ds = (tf.data.Dataset.list_files(pattern){chain}\n    .prefetch(tf.data.AUTOTUNE))\n"
              "dist = strategy.experimental_distribute_dataset(ds)\n")
    settings = Settings(root=ROOT)
    fixed = fix_source(source, "chain.py", settings)
    assert fixed.text.count("num_parallel_calls=tf.data.AUTOTUNE") == 25
    assert "TFD202" not in {f.code for f in lint_source(fixed.text.encode(), "chain.py", settings)}
    assert fix_source(fixed.text, "chain.py", settings).text == fixed.text
