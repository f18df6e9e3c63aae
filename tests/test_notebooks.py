"""Notebooks: code cells linted as one module, IPython lines skipped, findings placed by cell and line."""

from __future__ import annotations

import json
import re

import pytest

from tests.conftest import FIXTURES, ROOT, run_cli
from tfdoctor.config import Settings
from tfdoctor.lint.engine import lint_notebook
from tfdoctor.lint.notebooks import NotebookError, read_notebook

NOTEBOOK = FIXTURES / "notebooks" / "two_gpu_training.ipynb"


def _notebook(*sources: str, language: str = "python") -> bytes:
    cells = [{"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": source}
             for source in sources]
    data = {"cells": cells, "metadata": {"kernelspec": {"language": language, "name": "k"}}, "nbformat": 4,
            "nbformat_minor": 5}
    return (json.dumps(data, indent=1) + "\n").encode()


def _expected(raw: bytes) -> set[tuple[int, int, str]]:
    expected = set()
    for number, cell in enumerate(json.loads(raw)["cells"], 1):
        for line_number, line in enumerate("".join(cell["source"]).splitlines(), 1):
            match = re.search(r"# expect: ([A-Z0-9, ]+)$", line)
            if match:
                expected |= {(number, line_number, code.strip()) for code in match.group(1).split(",")}
    return expected


def test_fixture_findings_are_placed_by_cell_and_line_across_cells():
    raw = NOTEBOOK.read_bytes()
    findings = lint_notebook(raw, str(NOTEBOOK), Settings(root=ROOT, select=("TFD",)))  # TFD107 is opt-in
    assert {(f.cell, f.line, f.code) for f in findings} == _expected(raw)
    assert any(f.code == "TFD107" for f in findings)  # the strategy of cell 3, used in cell 7


def test_outputs_name_the_cell():
    concise = run_cli("lint", "--no-cache", "--format", "concise", str(NOTEBOOK))
    assert concise.returncode == 1
    assert f"{NOTEBOOK}:cell 6:2:12: TFD101 " in concise.stdout
    report = json.loads(run_cli("lint", "--no-cache", "--select", "TFD", "--format", "json", str(NOTEBOOK)).stdout)
    assert {f["cell"] for f in report["findings"]} == {5, 6, 7}
    text = run_cli("lint", "--no-cache", str(NOTEBOOK)).stdout
    assert "cell 6:2:12 TFD101" in text and "parallel = multi_gpu_model(model, gpus=2)" in text


def test_ipython_lines_become_pass_and_keep_line_numbers():
    notebook = read_notebook(_notebook(
        "%matplotlib inline\nx = 1\nfiles = !ls\nfor f in files:\n    !echo $f\n    y = f\nobj?\n%pip install \\\n  tensorflow\nz = 2\n",
        "%%bash\nfor f in *; do\n  echo $f\ndone\n",
        "%%time\nw = 3\n",
    ))
    lines = notebook.python.splitlines()
    assert lines[1:11] == ["pass  # tfdoctor-ipython", "x = 1", "pass  # tfdoctor-ipython", "for f in files:",
                           "    pass  # tfdoctor-ipython", "    y = f", "pass  # tfdoctor-ipython",
                           "pass  # tfdoctor-ipython", "pass  # tfdoctor-ipython", "z = 2"]
    assert lines[12:16] == ["pass  # tfdoctor-ipython"] * 4
    assert lines[17:] == ["pass  # tfdoctor-ipython", "w = 3"]
    compile(notebook.python, "notebook", "exec")


def test_syntax_error_is_placed_in_its_cell_and_bad_notebooks_are_one_finding(tmp_path):
    findings = lint_notebook(_notebook("import tensorflow as tf\n", "x = (\n"), "nb.ipynb", Settings(root=ROOT))
    assert [(f.code, f.cell) for f in findings] == [("TFD000", 2)]
    for name, content in (("broken.ipynb", b"{not json"), ("old.ipynb", b'{"nbformat": 3, "worksheets": []}'),
                          ("list.ipynb", b"[1, 2]")):
        (tmp_path / name).write_bytes(content + b" tensorflow")
    (tmp_path / "old.ipynb").write_bytes(b'{"nbformat": 3, "worksheets": [], "tensorflow": 1}')
    (tmp_path / "list.ipynb").write_bytes(b'["tensorflow"]')
    result = run_cli("lint", "--no-cache", "--format", "concise", str(tmp_path))
    assert result.returncode == 1 and "Traceback" not in result.stderr
    lines = sorted(result.stdout.splitlines())
    assert len(lines) == 3 and all(" TFD000 cannot parse: not a notebook: " in line for line in lines)
    assert "nbformat 3 is not supported" in result.stdout and "invalid JSON" in result.stdout


def test_other_kernels_are_not_linted():
    assert lint_notebook(_notebook("library(tensorflow)\nmulti_gpu_model(m)\n", language="R"), "r.ipynb",
                         Settings(root=ROOT)) == []


def test_unchanged_code_writes_back_the_same_bytes():
    raw = NOTEBOOK.read_bytes()
    notebook = read_notebook(raw)
    assert notebook.with_python(notebook.python).dumps(raw) == raw


def test_rewritten_cell_keeps_ipython_outputs_and_metadata():
    raw = NOTEBOOK.read_bytes()
    notebook = read_notebook(raw)
    changed = notebook.python.replace(".map(parse)", ".map(parse, num_parallel_calls=tf.data.AUTOTUNE)")
    after = json.loads(notebook.with_python(changed).dumps(raw))
    before = json.loads(raw)
    assert "num_parallel_calls" in "".join(after["cells"][4]["source"])
    assert after["cells"][4]["source"][0] == "%%time\n" and after["cells"][4]["outputs"] == before["cells"][4]["outputs"]
    assert [c for i, c in enumerate(after["cells"]) if i != 4] == [c for i, c in enumerate(before["cells"]) if i != 4]
    assert after["metadata"] == before["metadata"]
    with pytest.raises(NotebookError):
        notebook.with_python(changed.replace("# tfdoctor-cell 7\n", ""))


def test_fix_rewrites_only_the_changed_cell(tmp_path):
    notebook = tmp_path / "train.ipynb"
    notebook.write_bytes(NOTEBOOK.read_bytes())
    (tmp_path / "broken.ipynb").write_bytes(b"{tensorflow")
    result = run_cli("lint", "--no-cache", "--fix", "--format", "concise", str(tmp_path))
    assert f"fixed {notebook}:cell 5:2:37: TFD202" in result.stderr and "Traceback" not in result.stderr
    assert result.returncode == 1 and "TFD202" not in result.stdout and "TFD101" in result.stdout
    before, after = NOTEBOOK.read_text().splitlines(), notebook.read_text().splitlines()
    changed = [(old, new) for old, new in zip(before, after) if old != new]
    assert len(before) == len(after) and len(changed) == 1
    assert ".map(parse, num_parallel_calls=tf.data.AUTOTUNE)" in changed[0][1]
    again = run_cli("lint", "--no-cache", "--fix", str(notebook))
    assert "fixed 0 findings" in again.stderr and notebook.read_text().splitlines() == after


def _with_output(raw: bytes, size: int) -> bytes:
    """The notebook with an image output of about `size` bytes in its first cell (a plot saved as base64)."""
    data = json.loads(raw)
    data["cells"][0]["outputs"] = [{"output_type": "display_data", "metadata": {},
                                    "data": {"image/png": "iVBORw0KGgo" + "A" * size}}]
    return (json.dumps(data, indent=1) + "\n").encode()


def test_every_output_places_version_evidence_by_cell_and_never_on_the_flagged_call(tmp_path):
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "cited.ipynb").write_bytes(_notebook(
        "!pip install -q tensorflow==2.6.0\nimport tensorflow as tf\nimport horovod.tensorflow.keras as hvd\nhvd.init()\n",
        "ds = tf.data.TFRecordDataset(files).map(parse).batch(64)\nmodel.fit(ds, epochs=3)\n"))
    (tmp_path / "alone.ipynb").write_bytes(_notebook(
        "import tensorflow as tf\n", "model = tf.keras.Sequential()\nmodel.fit_generator(batches(), steps_per_epoch=10)\n"))
    # the call shows Keras 2 code, where it runs: no finding; under Keras 3 chosen, the finding cites the choice
    message = "`fit_generator` is removed in Keras 3; use `fit` (Keras 3 assumed: --target-keras)"
    cited = ("this training pipeline does not end in `prefetch`, so input and compute do not overlap; append "
             "`.prefetch(tf.data.AUTOTUNE)` (TF 2.6.0 assumed: `pip install tensorflow==2.6.0` at cited.ipynb:cell 1:1)")
    selected = ("--select", "TFD401,TFD203")
    report = json.loads(run_cli("lint", "--no-cache", "--format", "json", *selected, ".", cwd=tmp_path).stdout)
    assert [(f["path"], f["cell"], f["line"], f["message"]) for f in report["findings"]] == [
        ("cited.ipynb", 2, 1, cited)]
    concise = run_cli("lint", "--no-cache", "--format", "concise", *selected, "--target-keras", "3", "alone.ipynb",
                      cwd=tmp_path).stdout
    assert concise.splitlines() == [f"alone.ipynb:cell 2:2:1: TFD401 {message}"]
    concise = run_cli("lint", "--no-cache", "--format", "concise", *selected, "cited.ipynb", cwd=tmp_path).stdout
    assert concise.splitlines() == [f"cited.ipynb:cell 2:1:48: TFD203 {cited}"]
    text = run_cli("lint", "--no-cache", *selected, "cited.ipynb", cwd=tmp_path).stdout
    assert f"cell 2:1:48 TFD203 warning no-prefetch: {cited}" in text
    sarif = json.loads(run_cli("lint", "--no-cache", "--format", "sarif", *selected, "cited.ipynb",
                               cwd=tmp_path).stdout)
    [result] = sarif["runs"][0]["results"]
    assert result["message"]["text"] == f"cell 2: {cited}" and result["properties"]["cell"] == 2
    assert result["locations"][0]["physicalLocation"]["region"]["startLine"] == 1


def test_a_notebook_is_measured_by_its_code_cells_not_its_outputs(tmp_path):
    raw = _notebook("import tensorflow as tf\n",
                    "from tensorflow.keras.utils import multi_gpu_model\nm = multi_gpu_model(base, 2)\n")
    (tmp_path / "plots.ipynb").write_bytes(_with_output(raw, 50_000))
    (tmp_path / "code.ipynb").write_bytes(_notebook("import tensorflow as tf\n" + "x = 1\n" * 10_000))
    result = run_cli("lint", "--no-cache", "--format", "concise", "--max-file-bytes", "20000", "--select", "TFD101",
                     ".", cwd=tmp_path)
    assert result.stdout.splitlines() == ["plots.ipynb:cell 2:2:5: TFD101 `multi_gpu_model` copies the model onto "
                                          "each GPU by hand; use `tf.distribute.MirroredStrategy`"]
    assert "code.ipynb: not linted" in result.stderr and "plots.ipynb" not in result.stderr


def test_cell_place_reads_the_cell_marker_before_a_line():
    from tfdoctor.lint.notebooks import cell_place

    lines = ["# tfdoctor-cell 1\n", "import os\n", "# tfdoctor-cell 3\n", "x = 1\n", "y = 2\n"]
    assert cell_place(lines, 2) == (1, 1)
    assert cell_place(lines, 5) == (3, 2)
    assert cell_place(["import os\n"], 1) is None


def test_a_message_that_names_another_line_names_its_cell():
    raw = _notebook("import json, os\nimport tensorflow as tf\nstrategy = tf.distribute.MultiWorkerMirroredStrategy()\n",
                    "%%bash\necho start\n",
                    "x = 1\nos.environ['TF_CONFIG'] = json.dumps(config)\nwith strategy.scope():\n    model = build()\n")
    settings = Settings(root=ROOT, select=("TFD512",))
    [finding] = lint_notebook(raw, "nb.ipynb", settings)
    assert (finding.cell, finding.line) == (1, 3)
    assert finding.message == ("`MultiWorkerMirroredStrategy` is created before cell 3 line 2 sets `TF_CONFIG`, "
                               "so it never joins that cluster")


def test_a_dataset_step_that_ends_a_cell_is_displayed_not_discarded():
    raw = _notebook(
        "import tensorflow as tf\nds = tf.data.Dataset.range(100).batch(8)\n",
        "ds.batch(3)\n",  # the notebook shows it: looking at the batches
        "# a comment after the step\nds.shuffle(10)\nmodel.fit(ds)\n",  # not the cell's last line: discarded
        "ds.repeat();\n",  # `;` hides the value: discarded
        "model.fit(ds, epochs=2)\n",
    )
    findings = lint_notebook(raw, "nb.ipynb", Settings(root=ROOT))
    assert [(f.cell, f.line, f.column, f.code, f.message) for f in findings if f.code == "TFD208"] == [
        (3, 2, 4, "TFD208", "the dataset `shuffle` returns is discarded, so `ds` stays unchanged; assign the result"),
        (4, 1, 4, "TFD208", "the dataset `repeat` returns is discarded, so `ds` stays unchanged; assign the result"),
    ]


def test_a_related_place_in_the_same_notebook_is_named_by_cell_and_line():
    raw = _notebook(
        "import tensorflow.compat.v1 as tf\n",
        "for i in range(num_gpus):\n    with tf.device('/gpu:%d' % i):\n        outputs.append(model(inputs[i]))\n",
        "# the losses, per tower\nfor i in range(num_gpus):\n    with tf.device('/gpu:%d' % i):\n"
        "        losses.append(loss_fn(outputs[i]))\n",
    )
    [finding] = lint_notebook(raw, "nb.ipynb", Settings(root=ROOT, select=("TFD109",)))
    assert (finding.code, finding.cell, finding.line, finding.column) == ("TFD109", 2, 2, 10)
    assert finding.message.endswith("(another per-GPU loop at cell 3:3)")
    [related] = finding.related
    assert (related.path, related.cell, related.line, related.end_line) == ("nb.ipynb", 3, 3, 3)
    assert related.to_json()["cell"] == 3


def test_a_branch_no_cell_takes_is_not_reported():
    loader = ("import tensorflow as tf\n"
              "def get_dataset(files, ordered=False, cached=False):\n"
              "    ds = tf.data.TFRecordDataset(files).map(parse).shuffle(2048).batch(64)\n"
              "    if cached:\n"
              "        ds = ds.cache()\n"
              "    return ds.prefetch(tf.data.AUTOTUNE)\n")
    never = _notebook(loader, "model.fit(get_dataset(TRAIN), validation_data=get_dataset(VALID, ordered=True))\n")
    assert [f.code for f in lint_notebook(never, "nb.ipynb", Settings(root=ROOT))] == []
    once = _notebook(loader, "model.fit(get_dataset(TRAIN, cached=True))\n")
    assert [(f.code, f.cell, f.line) for f in lint_notebook(once, "nb.ipynb", Settings(root=ROOT))] == [("TFD204", 1, 5)]


def test_a_branch_on_the_type_of_a_parameter_no_cell_gives_is_not_reported():
    """`if isinstance(cache, str): ds.cache(cache)` where every call leaves `cache=True`: only the other branch runs."""
    loader = ("import tensorflow as tf\n"
              "def prepare(ds, cache=True):\n"
              "    if cache:\n"
              "        if isinstance(cache, str):\n"
              "            ds = ds.cache(cache)\n"
              "        else:\n"
              "            ds = ds.cache()\n"
              "    return ds.batch(32).prefetch(tf.data.AUTOTUNE)\n")
    source = "ds = tf.data.Dataset.list_files(PATTERN).map(load).shuffle(1000)\n"
    default = _notebook(loader, source + "model.fit(prepare(ds))\n")
    assert [(f.code, f.cell, f.line) for f in lint_notebook(default, "nb.ipynb", Settings(root=ROOT))] == [
        ("TFD204", 1, 7)]
    named = _notebook(loader, source + "model.fit(prepare(ds, cache='/tmp/ds'))\n")
    assert [(f.code, f.cell, f.line) for f in lint_notebook(named, "nb.ipynb", Settings(root=ROOT))] == [
        ("TFD204", 1, 5), ("TFD204", 1, 7)]


def test_a_strategy_in_a_mode_no_cell_picks_makes_no_multi_worker_finding():
    """`elif mode == "many_machines":` in `create_strategy(mode="one_machine")`, called without a mode: the
    notebook runs MirroredStrategy, so neither its late creation (TFD504) nor the save (TFD503) is reported."""
    maker = ("import tensorflow as tf\n"
             "print(tf.test.gpu_device_name())\n"
             "def create_strategy(mode='one_machine'):\n"
             "    if mode == 'one_machine':\n"
             "        return tf.distribute.MirroredStrategy()\n"
             "    elif mode == 'many_machines':\n"
             "        return tf.distribute.MultiWorkerMirroredStrategy()\n")
    save = "model.save('gs://bucket/model')\n"
    default = _notebook(maker, "strategy = create_strategy()\n", save)
    assert [f.code for f in lint_notebook(default, "nb.ipynb", Settings(root=ROOT))] == []
    chosen = _notebook(maker, "strategy = create_strategy('many_machines')\n", save)
    assert sorted((f.code, f.cell, f.line) for f in lint_notebook(chosen, "nb.ipynb", Settings(root=ROOT))) == [
        ("TFD503", 3, 1), ("TFD504", 1, 7)]


_FED_BY_PYTHON = ("import tensorflow as tf\nstrategy = tf.distribute.MirroredStrategy()",
                  "with strategy.scope():\n    model = build()\n"
                  "model.fit(tf.keras.preprocessing.image.ImageDataGenerator(rotation_range=10)"
                  ".flow_from_directory('data'), epochs=3)\n")


def _with_log(raw: bytes, cell: int, text: str) -> bytes:
    data = json.loads(raw)
    data["cells"][cell]["outputs"] = [{"name": "stderr", "output_type": "stream", "text": [text]}]
    return json.dumps(data).encode()


@pytest.mark.parametrize(("log", "reported"), [
    ("INFO:tensorflow:Using MirroredStrategy with devices ('/job:localhost/replica:0/task:0/device:GPU:0',)\n", False),
    ("INFO:tensorflow:Using MirroredStrategy with devices ('/job:localhost/replica:0/task:0/device:GPU:0', "
     "'/job:localhost/replica:0/task:0/device:GPU:1')\n", True),
    ("", True),
])
def test_a_notebook_whose_saved_run_had_one_replica_trains_on_one_device(tmp_path, log, reported):
    path = tmp_path / "train.ipynb"
    path.write_bytes(_with_log(_notebook(*_FED_BY_PYTHON), 0, log))
    findings = lint_notebook(path.read_bytes(), str(path), Settings(root=tmp_path), path)
    assert any(f.code == "TFD201" for f in findings) is reported


def test_a_printed_replica_count_of_one_counts_only_in_the_cell_that_prints_it(tmp_path):
    printing = ("import tensorflow as tf\nstrategy = tf.distribute.MirroredStrategy()\n"
                "print('REPLICAS:', strategy.num_replicas_in_sync)", _FED_BY_PYTHON[1])
    for cell, reported in ((0, False), (1, True)):  # cell 1 prints no count
        path = tmp_path / f"printed_in_cell_{cell}.ipynb"
        path.write_bytes(_with_log(_notebook(*printing), cell, "REPLICAS: 1\n"))
        findings = lint_notebook(path.read_bytes(), str(path), Settings(root=tmp_path), path)
        assert any(f.code == "TFD201" for f in findings) is reported
