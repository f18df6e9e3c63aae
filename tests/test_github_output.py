"""`--format github` prints workflow-command annotations; `--fail-on` sets which severities fail the run."""

from __future__ import annotations

from tests.conftest import run_cli
from tfdoctor.lint.findings import Finding, Severity
from tfdoctor.lint.output.github import annotation

BAD = "import tensorflow as tf\nfrom tensorflow.keras.utils import multi_gpu_model\nparallel = multi_gpu_model(model, gpus=2)\n"
WARNING_ONLY = ("import tensorflow as tf\nstrategy = tf.distribute.MirroredStrategy()\n"
                "ds = tf.data.TFRecordDataset(files).map(parse).batch(8).prefetch(2)\n"
                "model.fit(ds)\n")


def test_annotations(tmp_path):
    (tmp_path / "train.py").write_text(BAD)
    result = run_cli("lint", "--no-cache", "--format", "github", str(tmp_path))
    assert result.returncode == 1
    (line,) = result.stdout.splitlines()
    assert line == (f"::error file={tmp_path / 'train.py'},line=3,col=12,endLine=3,endColumn=42,"
                    "title=TFD101 multi-gpu-model::`multi_gpu_model` copies the model onto each GPU by hand; use "
                    "`tf.distribute.MirroredStrategy`")


def test_values_are_escaped():
    finding = Finding(path="a,b:c.ipynb", line=2, column=1, end_line=2, end_column=5, code="TFD201", name="n",
                      severity=Severity.INFO, message="50% slower\nreally", cell=3)
    assert annotation(finding) == ("::notice file=a%2Cb%3Ac.ipynb,line=2,col=1,endLine=2,endColumn=5,title=TFD201 n"
                                   "::cell 3: 50%25 slower%0Areally")


def test_fail_on(tmp_path):
    (tmp_path / "pipeline.py").write_text(WARNING_ONLY)
    (tmp_path / "bad.py").write_text(BAD)
    warning = str(tmp_path / "pipeline.py")
    assert run_cli("lint", "--no-cache", warning).returncode == 1  # default: any finding fails
    assert run_cli("lint", "--no-cache", "--fail-on", "warning", warning).returncode == 1
    assert run_cli("lint", "--no-cache", "--fail-on", "error", warning).returncode == 0
    assert run_cli("lint", "--no-cache", "--fail-on", "error", str(tmp_path)).returncode == 1
    bad_value = run_cli("lint", "--fail-on", "fatal", warning)
    assert bad_value.returncode == 2 and len(bad_value.stderr.splitlines()) == 1
