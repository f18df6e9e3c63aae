"""The `tfdoctor lint` command line as a user runs it: real subprocesses, real files."""

from __future__ import annotations

import json
import sys

from tests.conftest import FIXTURES, run_cli

BAD = """import tensorflow as tf
from tensorflow.keras.utils import multi_gpu_model
parallel = multi_gpu_model(model, gpus=2)
"""
GOOD = "import tensorflow as tf\nx = tf.constant(1.0)\n"


def test_json_report_has_the_documented_shape(tmp_path):
    (tmp_path / "train.py").write_text(BAD)
    result = run_cli("lint", "--format", "json", str(tmp_path))
    assert result.returncode == 1, result.stderr
    report = json.loads(result.stdout)
    assert set(report) == {"version", "findings", "summary"} and report["version"] == 1
    (finding,) = report["findings"]
    assert set(finding) == {"path", "line", "column", "end_line", "end_column", "code", "name", "severity",
                            "message", "fixable", "statement_line"}
    assert (finding["line"], finding["column"], finding["end_line"], finding["end_column"]) == (3, 12, 3, 42)
    assert (finding["code"], finding["name"], finding["severity"]) == ("TFD101", "multi-gpu-model", "error")
    assert finding["fixable"] is False and finding["statement_line"] == 3
    assert report["summary"] == {"files": 1, "findings": 1, "by_code": {"TFD101": 1}}


def test_concise_format_and_exit_codes(tmp_path):
    bad, good = tmp_path / "bad.py", tmp_path / "good.py"
    bad.write_text(BAD)
    good.write_text(GOOD)
    result = run_cli("lint", "--format", "concise", str(bad))
    assert result.returncode == 1
    assert result.stdout.strip().splitlines() == [f"{bad}:3:12: TFD101 " + result.stdout.split(" TFD101 ", 1)[1].strip()]
    assert run_cli("lint", str(good)).returncode == 0
    assert run_cli("lint", "--exit-zero", str(bad)).returncode == 0


def test_text_report_shows_source_line_caret_and_summary(tmp_path):
    (tmp_path / "bad.py").write_text(BAD)
    out = run_cli("lint", str(tmp_path)).stdout
    assert "TFD101" in out and "multi-gpu-model" in out and "error" in out
    assert "parallel = multi_gpu_model(model, gpus=2)" in out
    assert "^" * 30 in out
    assert "Found 1 finding (1 error) in 1 file." in out


def test_a_long_line_is_shown_as_a_window_around_the_finding(tmp_path):
    padding = "x = 1; " * 100  # 700 characters before the finding, as in generated code
    (tmp_path / "bad.py").write_text(BAD.replace("parallel = ", padding + "parallel = "))
    lines = run_cli("lint", str(tmp_path / "bad.py")).stdout.splitlines()
    shown = next(line for line in lines if "multi_gpu_model(model" in line)
    caret = lines[lines.index(shown) + 1]
    assert shown.startswith("     3 | ...") and not shown.endswith("...") and len(shown) < 220
    assert shown[caret.index("^"):].startswith("multi_gpu_model(model, gpus=2)")


def test_noqa_and_skip_file(tmp_path):
    noqa_line = tmp_path / "a.py"
    noqa_line.write_text(BAD.replace("gpus=2)", "gpus=2)  # noqa: TFD101"))
    bare = tmp_path / "b.py"
    bare.write_text(BAD.replace("gpus=2)", "gpus=2)  # noqa"))
    other_code = tmp_path / "c.py"
    other_code.write_text(BAD.replace("gpus=2)", "gpus=2)  # noqa: TFD102"))
    skipped = tmp_path / "d.py"
    skipped.write_text("# tfdoctor: skip-file\n" + BAD)
    statement = tmp_path / "e.py"
    statement.write_text("from keras.utils import multi_gpu_model\nparallel = (  # noqa: TFD101\n"
                         "    multi_gpu_model(model, gpus=2)\n)\n")
    report = json.loads(run_cli("lint", "--format", "json", str(tmp_path)).stdout)
    assert [f["path"] for f in report["findings"]] == [str(other_code)]


def test_select_ignore_and_pyproject_settings(tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        '[tool.tfdoctor]\nignore = ["TFD101"]\nexclude = ["generated"]\n'
        '[tool.tfdoctor.per-file-ignores]\n"legacy_*.py" = ["TFD1"]\n'
    )
    (tmp_path / "generated").mkdir()
    (tmp_path / "generated" / "bad.py").write_text(BAD)
    (tmp_path / "train.py").write_text(BAD)
    assert run_cli("lint", str(tmp_path)).returncode == 0
    assert run_cli("lint", "--select", "TFD101", "--ignore", "", str(tmp_path / "train.py")).returncode == 1
    (tmp_path / "pyproject.toml").write_text('[tool.tfdoctor]\nselect = ["TFD1"]\n'
                                             '[tool.tfdoctor.per-file-ignores]\n"legacy_*.py" = ["TFD101"]\n')
    (tmp_path / "legacy_train.py").write_text(BAD)
    report = json.loads(run_cli("lint", "--format", "json", str(tmp_path)).stdout)
    assert sorted(f["path"].rsplit("/", 1)[1] for f in report["findings"]) == ["bad.py", "train.py"]


def test_an_opt_in_rule_reports_only_when_select_names_it(tmp_path):
    towers = tmp_path / "towers.py"
    towers.write_text((FIXTURES / "patterns" / "multi_gpu_train_towers.py").read_text())

    def codes(*args: str) -> list[str]:
        report = json.loads(run_cli("lint", "--format", "json", "--no-cache", *args, str(towers)).stdout)
        return [f["code"] for f in report["findings"]]

    assert codes() == []
    assert codes("--select", "TFD109") == ["TFD109"]
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "towers"\n[tool.tfdoctor]\nselect = ["TFD"]\n')
    assert codes() == ["TFD109"]  # a library: its functions are its API, never dead code
    rules = run_cli("rules").stdout
    assert "Off by default." in rules.split("TFD109", 1)[1].split("TFD110", 1)[0]


def test_vendored_and_archived_folders_are_skipped_unless_named(tmp_path):
    for folder in ("third_party/lib", "third/official", "Vendor", " archived", "Archive/2019", "old", "Legacy", "Deprecated/v1", "obsolete", "discard"):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "old_train.py").write_text(BAD)
    (tmp_path / "train.py").write_text(BAD)
    report = json.loads(run_cli("lint", "--format", "json", str(tmp_path)).stdout)
    assert [f["path"] for f in report["findings"]] == [str(tmp_path / "train.py")]
    named = tmp_path / "Archive" / "2019" / "old_train.py"
    report = json.loads(run_cli("lint", "--format", "json", str(named)).stdout)
    assert [f["path"] for f in report["findings"]] == [str(named)]


def test_backup_copies_of_a_file_are_skipped_unless_named(tmp_path):
    for name in ("dataset-bak.py", "utils_bk.py", "train_backup.py", "train copy.py", "model.bak.py", "nb-bak.ipynb"):
        (tmp_path / name).write_text(BAD)
    for name in ("train.py", "bakery.py", "notebook.py"):  # `bak` and `bk` only as a suffix after a separator
        (tmp_path / name).write_text(BAD)
    report = json.loads(run_cli("lint", "--format", "json", str(tmp_path)).stdout)
    assert sorted(f["path"].rsplit("/", 1)[1] for f in report["findings"]) == ["bakery.py", "notebook.py", "train.py"]
    named = tmp_path / "dataset-bak.py"
    report = json.loads(run_cli("lint", "--format", "json", str(named)).stdout)
    assert [f["path"] for f in report["findings"]] == [str(named)]


KERAS_DEFAULT_LOSS = """import tensorflow as tf
loss_obj = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
def replica(x, y):
    with tf.GradientTape() as tape:
        loss = loss_obj(y, model(x))
    grads = tape.gradient(loss, model.trainable_variables)
@tf.function
def step(x, y):
    strategy.run(replica, args=(x, y))
"""


def test_target_keras_from_config_and_cli(tmp_path):
    (tmp_path / "train.py").write_text(KERAS_DEFAULT_LOSS)
    assert run_cli("lint", str(tmp_path)).returncode == 0  # newest Keras scales it
    assert run_cli("lint", "--target-keras", "2.15", str(tmp_path)).returncode == 1
    (tmp_path / "pyproject.toml").write_text('[tool.tfdoctor]\ntarget-keras = "3.5"\n')
    result = run_cli("lint", "--format", "concise", str(tmp_path))
    assert result.returncode == 1 and "Keras 3.5 assumed" in result.stdout
    assert run_cli("lint", "--target-keras", "3.9", str(tmp_path)).returncode == 0


def test_stdin_with_filename():
    result = run_cli("lint", "--format", "concise", "--stdin-filename", "pkg/train.py", "-", stdin=BAD)
    assert result.returncode == 1
    assert result.stdout.startswith("pkg/train.py:3:12: TFD101")
    text = run_cli("lint", "-", stdin=BAD).stdout
    assert "parallel = multi_gpu_model(model, gpus=2)" in text


def test_usage_and_path_errors_are_one_line(tmp_path):
    for args in (("lint", "--format", "xml"), ("lint", "--bogus"), ("rule", "TFD999"), ("frobnicate",)):
        result = run_cli(*args)
        assert result.returncode == 2, args
        assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr, args
    (tmp_path / "train.py").write_text(BAD)
    result = run_cli("lint", "--format", "concise", str(tmp_path / "missing.py"), str(tmp_path / "train.py"))
    assert result.returncode == 2
    assert result.stderr.strip() == f"error: {tmp_path / 'missing.py'}: no such file or directory"
    assert "TFD101" in result.stdout  # the other path was still linted
    (tmp_path / "pyproject.toml").write_text("[tool.tfdoctor]\nselect = [\n")
    result = run_cli("lint", str(tmp_path))
    assert result.returncode == 2 and "invalid TOML" in result.stderr and len(result.stderr.splitlines()) == 1
    (tmp_path / "pyproject.toml").write_text('[tool.tfdoctor]\ntarget-keras = "three"\n')
    result = run_cli("lint", str(tmp_path))
    assert result.returncode == 2 and "not a version" in result.stderr


def test_rules_table_and_rule_page():
    table = run_cli("rules")
    assert table.returncode == 0 and "TFD102" in table.stdout and "split-inside-replica" in table.stdout
    page = run_cli("rule", "TFD102")
    assert page.returncode == 0
    for heading in ("# TFD102: split-inside-replica", "## What it does", "## Why it is bad", "## Example",
                    "## Use instead"):
        assert heading in page.stdout
    assert run_cli("rule", "split-inside-replica").stdout == page.stdout


def test_lint_never_imports_tensorflow():
    code = (
        "import sys\nfrom tfdoctor.cli import main\n"
        f"status = main(['lint', '--exit-zero', *{[str(p) for p in FIXTURES.iterdir() if p.name != 'crashes']!r}])\n"
        "assert status == 0, status\n"
        "loaded = [m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'keras', 'cv2')]\n"
        "assert not loaded, loaded\n"
    )
    import subprocess

    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_tabs_and_spaces_that_python_accepts_are_linted_at_the_original_columns(tmp_path):
    """libcst's tokenizer refuses this indentation ("no matching outer block for dedent"); Python runs it."""
    source = "import tensorflow as tf\n\n\ndef main(gpus):\n  if gpus:\n\t  parallel = tf.keras.utils.multi_gpu_model(m, gpus=2)\n  return parallel\n"
    compile(source, "tabs.py", "exec")
    (tmp_path / "tabs.py").write_text(source)
    result = run_cli("lint", "--format", "concise", "--no-cache", str(tmp_path / "tabs.py"))
    assert result.stdout.splitlines() == [
        f"{tmp_path / 'tabs.py'}:6:15: TFD101 `multi_gpu_model` copies the model onto each GPU by hand; use "
        "`tf.distribute.MirroredStrategy`"]


SLOW_AND_REMOVED = """import tensorflow as tf
from tensorflow.keras.utils import multi_gpu_model
PER_REPLICA = 64
def gen():
    for path in paths:
        yield load(path)
ds = tf.data.Dataset.from_generator(gen, output_signature=SIG).batch(PER_REPLICA)
ds.shuffle(100)
dist = strategy.experimental_distribute_dataset(ds)
parallel = multi_gpu_model(model, gpus=2)
"""


def test_test_code_gets_only_the_rules_that_find_what_a_test_would_not_notice(tmp_path):
    project = tmp_path / "tests" / "project"  # a `tests` folder above the project root does not count
    (project / "tests").mkdir(parents=True)
    (project / "pyproject.toml").write_text("[tool.tfdoctor]\n")
    for name in ("train.py", "test_input.py", "input_test.py", "tests/helpers.py"):
        (project / name).write_text(SLOW_AND_REMOVED)
    report = json.loads(run_cli("lint", "--format", "json", str(project)).stdout)
    codes: dict[str, list[str]] = {}
    for finding in report["findings"]:
        codes.setdefault(finding["path"].split("project/", 1)[1], []).append(finding["code"])
    assert sorted(codes["train.py"]) == ["TFD101", "TFD106", "TFD201", "TFD208"]
    assert {name: found for name, found in codes.items() if name != "train.py"} == {
        "test_input.py": ["TFD208"], "input_test.py": ["TFD208"], "tests/helpers.py": ["TFD208"]}
