"""Whole-project analysis: evidence from the modules a file imports, where it is said, and the cache."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, lint_text, run_cli
from tfdoctor.config import Overrides
from tfdoctor.lint.engine import forget_files_read, lint_paths


@pytest.fixture
def loss_project(tmp_path: Path) -> Path:
    """The loss_helper fixture with a pyproject.toml, so the cache has a home."""
    shutil.copytree(FIXTURES / "projects" / "loss_helper", tmp_path / "proj")
    (tmp_path / "proj" / "pyproject.toml").write_text("[tool.tfdoctor]\n")
    return tmp_path / "proj"


def test_finding_says_where_its_evidence_lies(loss_project: Path):
    result = run_cli("lint", "--no-cache", "--format", "json", "--exit-zero", "train.py", cwd=loss_project)
    [finding] = json.loads(result.stdout)["findings"]
    assert (finding["code"], finding["path"], finding["line"]) == ("TFD104", "train.py", 13)
    assert finding["message"].endswith("(loss from `compute_loss` at losses.py:8)")
    assert finding["related"] == [{"path": "losses.py", "line": 8, "column": 12, "end_line": 8, "end_column": 39,
                                   "message": "loss from `compute_loss`", "subject": False}]
    text = run_cli("lint", "--no-cache", "train.py", cwd=loss_project).stdout
    assert "loss from `compute_loss` at losses.py:8" in text


def test_sarif_related_locations(loss_project: Path):
    result = run_cli("lint", "--no-cache", "--format", "sarif", "--exit-zero", "train.py", cwd=loss_project)
    [entry] = json.loads(result.stdout)["runs"][0]["results"]
    [related] = entry["relatedLocations"]
    assert related["message"]["text"] == "loss from `compute_loss`"
    assert related["physicalLocation"]["artifactLocation"]["uri"] == "losses.py"
    assert related["physicalLocation"]["region"] == {"startLine": 8, "startColumn": 12, "endLine": 8, "endColumn": 39}


def test_cache_entry_is_invalid_once_an_imported_module_changes(loss_project: Path, monkeypatch):
    monkeypatch.chdir(loss_project)
    cold = _cached_until_edited(loss_project / "losses.py", "return tf.reduce_mean(per_example)",
                                "return tf.nn.compute_average_loss(per_example, global_batch_size=64)")
    assert [f.code for f in cold] == ["TFD104"]


def _cached_until_edited(module: Path, old: str, new: str) -> list:
    """Lints train.py twice (the second a cache read, related locations included), then replaces `old` with
    `new` in `module`, which train.py imports: the next run is no cache read and finds nothing. Returns the
    first run's findings."""
    cold = lint_paths(["train.py"], cache=True)
    warm = lint_paths(["train.py"], cache=True)
    assert warm.cached == 1 and warm.findings == cold.findings
    module.write_text(module.read_text().replace(old, new))
    edited = lint_paths(["train.py"], cache=True)
    assert edited.cached == 0 and edited.findings == []
    return cold.findings


def test_only_the_named_files_are_reported(loss_project: Path, monkeypatch):
    monkeypatch.chdir(loss_project)
    (loss_project / "losses.py").write_text((loss_project / "losses.py").read_text()
                                           + "\nfrom tensorflow.keras.utils import multi_gpu_model\nm = multi_gpu_model(x, 2)\n")
    assert {f.path for f in lint_paths(["train.py"]).findings} == {"train.py"}
    assert {f.path for f in lint_paths(["."]).findings} == {"train.py", "losses.py"}


def test_unparsable_or_missing_imported_modules_are_not_evidence(loss_project: Path, monkeypatch):
    monkeypatch.chdir(loss_project)
    (loss_project / "losses.py").write_text("def compute_loss(:\n")
    report = lint_paths(["train.py"])
    assert report.findings == [] and not report.errors
    (loss_project / "losses.py").unlink()
    assert lint_paths(["train.py"]).findings == []


LOADER = '''import tensorflow as tf


def make_dataset(files):
    return tf.data.TFRecordDataset(files).map(decode).batch(64)


def decode(record):  # random: tf.data cannot run it in parallel by itself
    return tf.io.parse_tensor(record, tf.float32) + tf.random.normal([])
'''
TRAIN = '''import tensorflow as tf
from loader import make_dataset

strategy = tf.distribute.MirroredStrategy()
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
model.fit(make_dataset(["a.tfrecord"]).prefetch(1), epochs=2)
print("global batch", 64 * strategy.num_replicas_in_sync)  # the loader's 64 is meant per replica
'''


def _loader_project(tmp_path: Path, importers: int = 1) -> Path:
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "loader.py").write_text(LOADER)
    for number in range(importers):
        (tmp_path / f"train{number}.py").write_text(TRAIN)
    return tmp_path


def test_a_loader_is_linted_against_the_module_that_trains_on_it(tmp_path: Path, monkeypatch):
    monkeypatch.chdir(_loader_project(tmp_path))
    alone = lint_paths(["loader.py"])
    assert [(f.line, f.column, f.code) for f in alone.findings] == [(5, 43, "TFD202"), (5, 55, "TFD106")]
    assert all(f.message.endswith("(trained on at train0.py:8)") for f in alone.findings)
    # train0.py alone reports them on its call of the loader; the whole project once each, on the loader
    assert {(f.path, f.line, f.code) for f in lint_paths(["train0.py"]).findings} == {
        ("train0.py", 8, "TFD202"), ("train0.py", 8, "TFD106")}
    assert {(f.path, f.line, f.code) for f in lint_paths(["."]).findings} == {
        ("loader.py", 5, "TFD202"), ("loader.py", 5, "TFD106")}


def test_a_loader_trained_on_in_another_module_names_that_place_once(tmp_path: Path, monkeypatch):
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "loader.py").write_text(LOADER.replace(".batch(64)", ".batch(64 * strategy.num_replicas_in_sync)")
                                        .replace(".map(decode)", ".map(decode, num_parallel_calls=8).shuffle(256)"))
    (tmp_path / "loop.py").write_text("""import tensorflow as tf
import horovod.tensorflow as hvd
from loader import make_dataset

def main():
    hvd.init()
    for batch in make_dataset(["a.tfrecord"]):
        optimizer.apply_gradients(grads(batch))
""")
    monkeypatch.chdir(tmp_path)
    found = lint_paths(["loader.py"], Overrides(select=("TFD203",), target_tensorflow="2.11")).findings
    assert [(f.line, f.column, f.message) for f in found] == [
        (5, 90, "this training pipeline does not end in `prefetch`, so input and compute do not overlap; append "
                "`.prefetch(tf.data.AUTOTUNE)` (TF 2.11 assumed: --target-tensorflow) (trained on in `main` at loop.py:7)")]
    # from TF 2.12, TensorFlow appends an autotuned prefetch itself
    assert lint_paths(["loader.py"], Overrides(select=("TFD203",), target_tensorflow="2.15")).findings == []


def test_a_loader_whose_text_differs_from_the_file_or_that_every_module_imports_stays_silent(tmp_path: Path,
                                                                                              monkeypatch):
    from tfdoctor.config import settings_for
    from tfdoctor.lint.engine import lint_source

    monkeypatch.chdir(_loader_project(tmp_path))
    edited = (LOADER + "# not saved yet\n").encode()  # an editor's buffer: the importer sees the file on disk
    assert lint_source(edited, "loader.py", settings_for(tmp_path / "loader.py"), tmp_path / "loader.py") == []
    monkeypatch.chdir(_loader_project(tmp_path, importers=17))  # more importers than MAX_CONSUMERS
    assert lint_paths(["loader.py"]).findings == []


def test_names_a_star_import_brings_resolve_and_a_cached_result_rests_on_that_module(tmp_path: Path, monkeypatch):
    """`from common import *` brings `tf` and the loss helper: the loss of a base-class method is seen, and
    reported where the replica function calls it; editing common.py invalidates the cached result."""
    project = tmp_path / "proj"
    shutil.copytree(FIXTURES / "projects" / "star_imports", project)
    monkeypatch.chdir(project)
    cold = _cached_until_edited(project / "common.py", "return tf.reduce_mean(",
                                "return tf.nn.compute_average_loss(global_batch_size=64, per_example_loss=")
    assert [(f.code, f.line, f.column) for f in cold] == [("TFD104", 21, 25)]


def test_metrics_of_a_class_that_other_modules_construct_inside_the_scope(tmp_path: Path, monkeypatch):
    """Evaluation.__init__ makes metrics outside any scope of its own module: constructed inside
    `strategy.scope()` in train.py they are mirrored; constructed outside it there, they are not."""
    project = tmp_path / "proj"
    shutil.copytree(FIXTURES / "projects" / "evaluator_in_scope", project)
    monkeypatch.chdir(project)
    assert [(f.code, f.line) for f in lint_paths(["evaluation.py"], cache=False).findings] == [("TFD105", 33)]
    train = project / "train.py"
    train.write_text(train.read_text().replace(
        "    evaluator = Evaluation(model, strategy, test)\n", "") + "evaluator = Evaluation(model, strategy, test)\n")
    found = lint_paths(["evaluation.py"], cache=False).findings
    assert [(f.code, f.line) for f in found] == [("TFD105", 9), ("TFD105", 10), ("TFD105", 33)]


PY_FUNCTION_MAP = "tf.data.TFRecordDataset(files).map(lambda r: tf.py_function(decode, [r], tf.float32))"
EVERY_RULE = Overrides(select=("TFD",))  # TFD205, whose findings these tests place, is opt-in
DEAD_CODE = f"""import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
class Pipelines:
    def used(self, files):
        return {PY_FUNCTION_MAP}
    def never_used(self, files):
        return {PY_FUNCTION_MAP}
def orphan(files):
    return {PY_FUNCTION_MAP}
ds = Pipelines().used(files)
"""


def test_code_that_nothing_in_the_application_names_gives_no_finding(tmp_path: Path, monkeypatch):
    (tmp_path / ".git").mkdir()
    (tmp_path / "data.py").write_text(DEAD_CODE)
    monkeypatch.chdir(tmp_path)
    assert [f.line for f in lint_paths(["data.py"], EVERY_RULE).findings] == [5]  # `never_used`, `orphan` never run
    (tmp_path / "test_data.py").write_text("import tensorflow as tf\ndef test_shuffles():\n"
                                           "    ds = tf.data.Dataset.range(8)\n    ds.shuffle(8)\n"
                                           "    model.fit(ds, epochs=1)\n")
    assert [(f.line, f.code) for f in lint_paths(["test_data.py"]).findings] == [(4, "TFD208")]  # pytest runs it
    (tmp_path / "explore.ipynb").write_text(json.dumps({"cells": [{"cell_type": "code", "metadata": {}, "outputs": [],
                                                                   "source": ["from data import orphan\n"]}],
                                                        "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    assert [f.line for f in lint_paths(["data.py"], EVERY_RULE).findings] == [5, 9]  # a notebook calls `orphan`
    (tmp_path / "setup.py").write_text("from setuptools import setup\nsetup(name='data')\n")
    assert [f.line for f in lint_paths(["data.py"], EVERY_RULE).findings] == [5, 7, 9]  # a library's API


def test_a_method_that_nothing_names_in_a_class_of_the_projects_own_bases_gives_no_finding(tmp_path: Path,
                                                                                          monkeypatch):
    """`UNet(BaseModel)`, `BaseModel(ABC)`: no framework calls their methods by name, so one that no file of the
    application names never runs; a class derived from Keras' `Model` may have hooks Keras calls."""
    (tmp_path / ".git").mkdir()
    (tmp_path / "base.py").write_text("from abc import ABC\n\n\nclass BaseModel(ABC):\n    def train(self):\n"
                                      "        raise NotImplementedError\n")
    method = ("    def distributed_train(self):\n        x = tf.constant([1.0, 2.0])\n"
              "        strategy = tf.distribute.MultiWorkerMirroredStrategy()\n\n")
    (tmp_path / "unet.py").write_text("import tensorflow as tf\nfrom base import BaseModel\n\n\nclass UNet(BaseModel):\n"
                                      "    def train(self):\n        pass\n\n" + method)
    (tmp_path / "main.py").write_text("from unet import UNet\nUNet().train()\n")
    monkeypatch.chdir(tmp_path)
    assert lint_paths(["unet.py"], Overrides(select=("TFD504",))).findings == []
    (tmp_path / "unet.py").write_text("import tensorflow as tf\n\n\nclass UNet(tf.keras.Model):\n"
                                      "    def train(self):\n        pass\n\n" + method)
    assert [f.line for f in lint_paths(["unet.py"], Overrides(select=("TFD504",))).findings] == [10]


TOWERS = """import tensorflow.compat.v1 as tf


class Towers(object):
    def __init__(self, num_gpus):
        assert num_gpus > 1, "Towers objects need several GPUs"
        super(Towers, self).__init__()
        for i in range(num_gpus):
            with tf.device("/gpu:%d" % i):
                self.losses.append(tower_loss(i))


class MarginTowers(object):
    def __init__(self, num_gpus):
        assert num_gpus > 1, "MarginTowers objects, like Towers objects, need several GPUs"
        for i in range(num_gpus):
            with tf.device("/gpu:%d" % i):
                self.losses.append(margin_loss(i))
"""


def test_places_of_one_problem_are_reported_at_the_first_one_that_runs(tmp_path: Path, monkeypatch):
    """TFD109 reports a module's towers once. `Towers` is named only in its own body and in messages, so it is
    dead: the one finding stands at the towers of `MarginTowers`, which train.py uses."""
    (tmp_path / ".git").mkdir()
    (tmp_path / "parallel.py").write_text(TOWERS)
    (tmp_path / "train.py").write_text("from parallel import MarginTowers\nMarginTowers(4)\n")
    monkeypatch.chdir(tmp_path)
    [finding] = lint_paths(["parallel.py"], Overrides(select=("TFD109",))).findings
    assert (finding.line, finding.related) == (17, ())
    (tmp_path / "train.py").write_text("from parallel import MarginTowers, Towers\nMarginTowers(4)\nTowers(4)\n")
    forget_files_read()
    [finding] = lint_paths(["parallel.py"], Overrides(select=("TFD109",))).findings
    assert (finding.line, [r.line for r in finding.related]) == (9, [17])


def test_a_horovod_optimizer_two_imports_away_makes_a_tf1_horovod_program(tmp_path: Path, monkeypatch):
    """main.py trains an Estimator whose model function (model.py) takes its optimizer from optimization.py,
    which wraps it in `hvd.DistributedOptimizer`: the `train` without the broadcast hook is TFD516."""
    (tmp_path / ".git").mkdir()
    (tmp_path / "optimization.py").write_text(
        "import tensorflow as tf\nimport horovod.tensorflow as hvd\n\n\ndef create_optimizer(loss):\n"
        "    return hvd.DistributedOptimizer(tf.train.AdamOptimizer(1e-4)).minimize(loss)\n")
    (tmp_path / "model.py").write_text(
        "import tensorflow as tf\nimport optimization\n\n\ndef model_fn(features, labels, mode):\n"
        "    loss = tf.reduce_mean(features)\n"
        "    return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=optimization.create_optimizer(loss))\n")
    (tmp_path / "main.py").write_text(
        "import tensorflow as tf\nimport horovod.tensorflow as hvd\nimport model\n\nhvd.init()\n"
        "estimator = tf.estimator.Estimator(model_fn=model.model_fn)\n"
        "estimator.train(input_fn=train_input_fn, max_steps=1000)\n")
    monkeypatch.chdir(tmp_path)
    assert [f.line for f in lint_paths(["main.py"], Overrides(select=("TFD516",))).findings] == [7]
    (tmp_path / "optimization.py").write_text(
        "import tensorflow as tf\n\n\ndef create_optimizer(loss):\n"
        "    return tf.train.AdamOptimizer(1e-4).minimize(loss)\n")
    forget_files_read()
    assert lint_paths(["main.py"], Overrides(select=("TFD516",))).findings == []  # no gradients averaged: not Horovod


def test_a_tf_function_that_nothing_calls_gives_no_finding(tmp_path: Path, monkeypatch):
    """`@tf.function` only wraps a function: a step nothing names never runs, unlike one a framework registers."""
    (tmp_path / ".git").mkdir()
    steps = ("import tensorflow as tf\nstrategy = tf.distribute.MirroredStrategy()\n\n\n"
             "def replica(x):\n    return tf.reduce_mean(model(x))\n\n\n"
             "@tf.function\ndef train_step(x):\n    losses = strategy.run(replica, args=(x,))\n"
             "    return strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)\n\n\n"
             "@tf.function(jit_compile=True)\ndef val_step(x):\n    losses = strategy.run(replica, args=(x,))\n"
             "    return strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)\n")
    (tmp_path / "steps.py").write_text(steps + "\n\nfor batch in dataset:\n    train_step(batch)\n")
    monkeypatch.chdir(tmp_path)
    assert [f.line for f in lint_paths(["steps.py"], Overrides(select=("TFD108",))).findings] == [12]
    (tmp_path / "steps.py").write_text(steps.replace("@tf.function(jit_compile=True)", "@register_step"))
    forget_files_read()
    assert [f.line for f in lint_paths(["steps.py"], Overrides(select=("TFD108",))).findings] == [18]


def test_tf_app_run_runs_the_main_it_does_not_name(tmp_path: Path, monkeypatch):
    (tmp_path / ".git").mkdir()
    main = ("import tensorflow as tf\n\n\ndef main(argv=None):\n    for i in range(FLAGS.num_gpus):\n"
            "        with tf.device('/gpu:%d' % i):\n            grads.append(tower_loss(i))\n\n\n")
    (tmp_path / "train.py").write_text(main + "if __name__ == '__main__':\n    tf.app.run()\n")
    monkeypatch.chdir(tmp_path)
    assert [f.line for f in lint_paths(["train.py"], Overrides(select=("TFD109",))).findings] == [6]
    (tmp_path / "train.py").write_text(main + "if __name__ == '__main__':\n    tf.app.run(other)\n")
    forget_files_read()
    assert lint_paths(["train.py"], Overrides(select=("TFD109",))).findings == []


def test_a_definition_that_a_later_one_of_the_same_name_replaces_gives_no_finding(tmp_path: Path, monkeypatch):
    """Three `def model_fn` in a row, in a folder that is no application: only the last can ever run."""
    first = ("def model_fn():\n    parallel = multi_gpu_model(build(), gpus=4)\n    parallel.fit(x, y)\n\n\n")
    last = "def model_fn():\n    return build()\n"
    (tmp_path / "models.py").write_text("from tensorflow.keras.utils import multi_gpu_model\n\n\n" + first + last)
    monkeypatch.chdir(tmp_path)
    assert lint_paths(["models.py"], Overrides(select=("TFD101",))).findings == []
    # the first one runs when something between the two names it
    (tmp_path / "models.py").write_text("from tensorflow.keras.utils import multi_gpu_model\n\n\n" + first
                                        + "MODEL = model_fn()\n\n\n" + last)
    assert [f.line for f in lint_paths(["models.py"], Overrides(select=("TFD101",))).findings] == [5]


PREPARE = """import tensorflow as tf


def augment(path):
    return tf.image.random_flip_left_right(tf.io.decode_jpeg(tf.io.read_file(path)))


def prepare(ds, cache=False):
    if cache:
        ds = ds.cache()
    return ds.shuffle(2000).batch(32).prefetch(tf.data.AUTOTUNE)


"""
FIT = "model.fit(prepare(tf.data.Dataset.list_files('data/*.jpg').map(augment)), epochs=3)\n"


def test_a_branch_that_no_call_in_the_application_takes_gives_no_finding(tmp_path: Path, monkeypatch):
    """`if cache:` in a public function of an application, whose calls (in its module and in the project's
    other files) all leave `cache=False`: the `cache()` after a random `map` never runs."""
    (tmp_path / ".git").mkdir()
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text(PREPARE + FIT)
    assert _cache_findings() == []
    (tmp_path / "cached.py").write_text("import tensorflow as tf\nfrom train import augment, prepare\n"
                                        "model.fit(prepare(tf.data.Dataset.list_files('b/*.jpg').map(augment), cache=True))\n")
    assert _cache_findings() == [10]  # another file sets it
    (tmp_path / "cached.py").unlink()
    (tmp_path / "train.py").write_text(PREPARE + FIT + "loaders = {'train': prepare}\n")  # handed on: calls unseen
    assert _cache_findings() == [10]
    (tmp_path / "train.py").write_text(PREPARE + FIT)
    (tmp_path / "setup.py").write_text("from setuptools import setup\nsetup(name='train')\n")  # a library's users
    assert _cache_findings() == [10]


def _cache_findings() -> list[int]:
    return [f.line for f in lint_paths(["train.py"]).findings if f.code == "TFD204"]


def test_a_notebook_function_that_no_cell_calls_gives_no_finding(tmp_path: Path, monkeypatch):
    cells = [{"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
              "source": DEAD_CODE.splitlines(keepends=True)}]
    (tmp_path / "train.ipynb").write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4,
                                                      "nbformat_minor": 5}))
    monkeypatch.chdir(tmp_path)
    assert [(f.cell, f.line) for f in lint_paths(["train.ipynb"], EVERY_RULE).findings] == [(1, 5)]



def test_a_pipeline_trained_on_only_in_a_unit_test_is_not_reported(tmp_path: Path):
    """TFD201 on a loader's `from_generator` pipeline: reported where a training script fits on it, not where
    only a unit test does."""
    (tmp_path / "setup.cfg").write_text("[metadata]\nname = proj\n")
    (tmp_path / "loader.py").write_text(
        "import tensorflow as tf\n\n\n"
        "def make(generator):\n"
        "    return tf.data.Dataset.from_generator(generator, output_signature=SIGNATURE).batch(8)\n")
    fit = ("    strategy = tf.distribute.MirroredStrategy()\n"
           "    with strategy.scope():\n"
           "        model = build_model()\n"
           "    model.fit(make(samples), epochs=1)\n")
    (tmp_path / "test_loader.py").write_text("import tensorflow as tf\nfrom loader import make\n\n\ndef test_fit():\n" + fit)
    only_test = run_cli("lint", "--no-cache", "--format", "json", "--exit-zero", "--select", "TFD201", ".", cwd=tmp_path)
    assert json.loads(only_test.stdout)["findings"] == []
    (tmp_path / "train.py").write_text("import tensorflow as tf\nfrom loader import make\n\n\ndef main():\n" + fit)
    trained = json.loads(run_cli("lint", "--no-cache", "--format", "json", "--exit-zero", "--select", "TFD201", ".",
                                 cwd=tmp_path).stdout)
    assert [(f["code"], f["path"], f["line"], f["message"]) for f in trained["findings"]] == [
        ("TFD201", "loader.py", 5, "training is fed by `Dataset.from_generator`, one Python thread under the GIL; use "
                                   "a `tf.data` pipeline (trained on in `main` at train.py:9)")]


def test_a_loader_whose_flag_picks_a_file_reader_is_not_reported(tmp_path: Path):
    """TFD201 leaves a loader's `from_generator` pipeline alone when a flag picks a TFRecord reader instead
    (the fast path is already there), and reports it once the reader is gone."""
    (tmp_path / "setup.cfg").write_text("[metadata]\nname = proj\n")
    loader = ("import tensorflow as tf\n\n\n"
              "class Loader:\n"
              "    def __init__(self, from_tfrecords):\n"
              "        self.from_tfrecords = from_tfrecords\n\n"
              "    def __call__(self):\n"
              "        if not self.from_tfrecords:\n"
              "            dataset = self.from_audio()\n"
              "        else:\n"
              "            dataset = tf.data.TFRecordDataset(FILES).map(parse)\n"
              "        return dataset.batch(8)\n\n"
              "    def from_audio(self):\n"
              "        dataset = tf.data.Dataset.from_generator(read_audio, output_signature=SIGNATURE)\n"
              "        return dataset\n")
    (tmp_path / "loader.py").write_text(loader)
    (tmp_path / "train.py").write_text(
        "import tensorflow as tf\nfrom loader import Loader\n\n\ndef main(args):\n"
        "    strategy = tf.distribute.MirroredStrategy()\n"
        "    with strategy.scope():\n"
        "        model = build_model()\n"
        "    loader = Loader(args.from_tfrecords)\n"
        "    model.fit(loader(), epochs=1)\n")
    def findings() -> list[tuple[str, str, int]]:
        out = run_cli("lint", "--no-cache", "--format", "json", "--exit-zero", "--select", "TFD201", ".", cwd=tmp_path)
        return [(f["code"], f["path"], f["line"]) for f in json.loads(out.stdout)["findings"]]
    assert findings() == []
    (tmp_path / "loader.py").write_text(loader.replace("tf.data.TFRecordDataset(FILES).map(parse)", "self.from_audio()"))
    assert findings() == [("TFD201", "loader.py", 16)]


def test_an_optimizer_given_by_another_module_decides_the_unscaled_loss_message(tmp_path: Path, monkeypatch):
    """TFD104 follows `self.optimizer` to the Adam a training script passes to the trainer's constructor
    (the `None` a prediction script passes applies nothing): a per-replica mean under Adam without clipping is left alone, and
    the same trainer given SGD is reported."""
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "trainer.py").write_text(
        "import tensorflow as tf\n\n\n"
        "class Trainer:\n"
        "    def __init__(self, model, strategy, optimizer=None):\n"
        "        self.model = model\n"
        "        self.strategy = strategy\n"
        "        self.optimizer = optimizer\n\n"
        "    def replica_step(self, x, y):\n"
        "        with tf.GradientTape() as tape:\n"
        "            loss = tf.reduce_mean(tf.square(self.model(x) - y))\n"
        "        grads = tape.gradient(loss, self.model.trainable_variables)\n"
        "        self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables))\n\n"
        "    @tf.function\n"
        "    def step(self, x, y):\n"
        "        return self.strategy.run(self.replica_step, args=(x, y))\n")
    script = ("import tensorflow as tf\nfrom trainer import Trainer\n\n"
              "strategy = tf.distribute.MirroredStrategy()\n"
              "trainer = Trainer(build_model(), strategy, optimizer=tf.optimizers.{}(1e-3))\n"
              "for x, y in dataset:\n    trainer.step(x, y)\n")
    (tmp_path / "train.py").write_text(script.format("Adam"))
    (tmp_path / "predict.py").write_text("from trainer import Trainer\n\ntrainer = Trainer(load_model(), None, "
                                         "optimizer=None)\nprint(trainer.model(inputs))\n")
    monkeypatch.chdir(tmp_path)
    assert [f.code for f in lint_paths(["."], Overrides(select=("TFD104",))).findings] == []
    (tmp_path / "train.py").write_text(script.format("SGD"))
    assert [(f.path, f.line, f.message) for f in lint_paths(["."], Overrides(select=("TFD104",))).findings] == [
        ("trainer.py", 12, "the loss of replica function `replica_step` is a per-replica mean, so its summed gradients "
                           "are N times too large")]


def test_generator_methods_of_a_project_on_standalone_keras_before_2_4_are_not_removed_apis(tmp_path: Path,
                                                                                            monkeypatch):
    """TFD401: a script that trains with `fit_generator` the model of a project module that imports
    `multi_gpu_model` from standalone Keras (gone in 2.4) targets Keras 2.3 or earlier, where `fit` takes no
    generator; with `tf.keras` in that module instead, and Keras 3 chosen, the script is reported."""
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "models.py").write_text("from keras.utils import multi_gpu_model\n\n\n"
                                        "def build(gpus):\n    return multi_gpu_model(make(), gpus=gpus)\n")
    (tmp_path / "bench.py").write_text("import tensorflow as tf\nfrom models import build\n\n"
                                       "model = build(2)\nmodel.fit_generator(loader, epochs=1)\n")
    monkeypatch.chdir(tmp_path)
    assert lint_paths(["bench.py"], Overrides(select=("TFD401",))).findings == []
    (tmp_path / "models.py").write_text("import tensorflow as tf\n\n\n"
                                        "def build(gpus):\n    return make()\n")
    assert lint_paths(["bench.py"], Overrides(select=("TFD401",))).findings == []  # Keras 2 code: it runs there
    chosen = lint_paths(["bench.py"], Overrides(select=("TFD401",), target_keras="3"))
    assert [(f.line, f.message) for f in chosen.findings] == [
        (5, "`fit_generator` is removed in Keras 3; use `fit` (Keras 3 assumed: --target-keras)")]


def test_a_project_module_standing_in_for_tensorflow_resolves_to_it(tmp_path: Path, monkeypatch):
    """`import mylib.compat as tf`, where that module star-imports `tensorflow.compat.v2`: `@tf.function` is
    TensorFlow's (TFD107 sees the graph), while a name the module defines itself stays the project's."""
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "mylib").mkdir()
    (tmp_path / "mylib" / "__init__.py").write_text("")
    (tmp_path / "mylib" / "compat.py").write_text("from tensorflow.compat.v2 import *\n\n\n"
                                                  "def run_eagerly(fn):\n    return fn\n")
    step = ("import mylib.compat as tf\n\nstrategy = tf.distribute.MirroredStrategy()\n\n\n"
            "@tf.{}\ndef loop(batches):\n    for batch in batches:\n        strategy.run(replica, args=(batch,))\n")
    (tmp_path / "train.py").write_text(step.format("function"))
    monkeypatch.chdir(tmp_path)
    assert lint_paths(["train.py"], Overrides(select=("TFD107",))).findings == []
    (tmp_path / "train.py").write_text(step.format("run_eagerly"))
    assert [f.line for f in lint_paths(["train.py"], Overrides(select=("TFD107",))).findings] == [9]


def test_a_model_built_in_the_scope_of_the_script_distributes_the_trainer_modules_fit(tmp_path: Path, monkeypatch):
    """TFD203: a trainer module fits `self.model` on a pipeline without `prefetch`; the script that builds the
    model inside `strategy.scope()` and gives it to the trainer (imported through its package's `__init__`)
    makes that `fit` distribute the dataset, which prefetches to the devices."""
    (tmp_path / "pyproject.toml").write_text('[tool.tfdoctor]\ntarget-tensorflow = "2.3"\n')
    (tmp_path / "pkg" / "train").mkdir(parents=True)
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "train" / "__init__.py").write_text("from .trainer import Trainer\n")
    (tmp_path / "pkg" / "train" / "trainer.py").write_text(
        "import tensorflow as tf\n\n\nclass Trainer:\n    def __init__(self, model):\n        self.model = model\n\n"
        "    def fit(self, files):\n        ds = tf.data.TFRecordDataset(files).map(parse, num_parallel_calls=8).shuffle(1024).batch(64)\n"
        "        self.model.fit(ds, epochs=3)\n")
    script = ("import tensorflow as tf\n\n\ndef main():\n{}        model = build()\n        from pkg.train import Trainer\n"
              "        trainer = Trainer(model)\n    trainer.fit(files)\n")
    (tmp_path / "train.py").write_text(script.format("    with tf.distribute.MirroredStrategy().scope():\n"))
    monkeypatch.chdir(tmp_path)
    assert lint_paths(["."], Overrides(select=("TFD203",))).findings == []
    (tmp_path / "train.py").write_text(script.format("    import horovod.tensorflow.keras as hvd\n    hvd.init()\n"
                                                     "    if True:\n"))
    assert [(f.path, f.line) for f in lint_paths(["."], Overrides(select=("TFD203",))).findings] == [
        ("pkg/train/trainer.py", 9)]


def test_generator_methods_of_keras_1_code_are_not_removed_apis(tmp_path: Path, monkeypatch):
    """TFD401: a script on Keras 1 (`nb_val_samples=`, `border_mode=`; its Keras comes through a star import),
    where `fit` takes no generator."""
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "train.py").write_text("import tensorflow as tf\nfrom utils2 import *\n\n"
                                       "x = Convolution2D(64, 3, 3, border_mode='same')(inputs)\n"
                                       "model.fit_generator(gen, 1000, 10, validation_data=val, nb_val_samples=100)\n")
    monkeypatch.chdir(tmp_path)
    assert lint_paths(["train.py"], Overrides(select=("TFD401",))).findings == []


def test_a_branch_that_a_module_constant_rules_out_is_not_reported():
    """`gpus = 1` set once at the top of a script, then `if gpus >= 2: multi_gpu_model(...)`: that call never
    runs. With `gpus = 2` it does, and so does a constant the script sets again (from a flag)."""
    script = ("import tensorflow as tf\n"
              "gpus = {gpus}\n"
              "model = build_model()\n"
              "if gpus >= 2:\n"
              "    model = tf.keras.utils.multi_gpu_model(model, gpus=gpus)\n")
    assert [f.code for f in lint_text(script.format(gpus=1), select=("TFD101",))] == []
    assert [(f.code, f.line) for f in lint_text(script.format(gpus=2), select=("TFD101",))] == [("TFD101", 5)]
    again = script.format(gpus=1) + "gpus = args.gpus\n"
    assert [(f.code, f.line) for f in lint_text(again, select=("TFD101",))] == [("TFD101", 5)]


def test_a_loader_branch_that_the_callers_literal_argument_rules_out_is_not_trained_on(tmp_path: Path, monkeypatch):
    """`reader.make(files, "valid")` feeds only `validation_data`: the unscaled batch in the loader's `else`
    (taken when `self.mode != "train"`) is not what `fit` trains on; it is once the training call passes it."""
    (tmp_path / "setup.cfg").write_text("[metadata]\nname = proj\n")
    (tmp_path / "loader.py").write_text(
        "import tensorflow as tf\n\n\n"
        "class Reader:\n"
        "    def make(self, files, mode=\"train\"):\n"
        "        self.mode = mode\n"
        "        ds = tf.data.TFRecordDataset(files)\n"
        "        if self.mode == \"train\":\n"
        "            ds = ds.shuffle(1000).batch(64 * strategy.num_replicas_in_sync)\n"
        "        else:\n"
        "            ds = ds.batch(64)\n"
        "        return ds\n")
    train = ("import tensorflow as tf\nfrom loader import Reader\n\n"
             "strategy = tf.distribute.MirroredStrategy()\n"
             "with strategy.scope():\n"
             "    model = build_model()\n"
             "reader = Reader()\n"
             "train = reader.make(TRAIN, \"train\")\n"
             "valid = reader.make(VALID, \"valid\")\n"
             "model.fit(train, validation_data=valid, epochs=10)\n")
    (tmp_path / "train.py").write_text(train)
    monkeypatch.chdir(tmp_path)
    assert lint_paths(["."], Overrides(select=("TFD106",))).findings == []
    (tmp_path / "train.py").write_text(train.replace("(TRAIN, \"train\")", "(TRAIN, mode=\"test\")"))
    assert [(f.path, f.line) for f in lint_paths(["."], Overrides(select=("TFD106",))).findings] == [("loader.py", 11)]


def test_a_loaders_config_batch_that_the_training_module_treats_as_global_is_left_alone(tmp_path: Path, monkeypatch):
    """`ds.batch(cfg.TRAIN.BATCH_SIZE)` in the loader, and the training module divides the examples by that same
    size for its steps (the global batch, by design); a prediction loop over a distributed dataset, with
    `strategy.run` in the loop itself, trains on nothing."""
    (tmp_path / "setup.cfg").write_text("[metadata]\nname = proj\n")
    (tmp_path / "loader.py").write_text(
        "import tensorflow as tf\n\n\n"
        "def load(cfg, split):\n"
        "    ds = tf.data.TFRecordDataset(cfg.FILES[split]).map(parse, num_parallel_calls=tf.data.AUTOTUNE)\n"
        "    if split == 'train':\n"
        "        ds = ds.shuffle(1000).repeat().batch(cfg.TRAIN.BATCH_SIZE).prefetch(2)\n"
        "    else:\n"
        "        ds = ds.batch(cfg.VAL.BATCH_SIZE).prefetch(2)\n"
        "    return ds\n")
    train = ("import tensorflow as tf\nfrom loader import load\n\n"
             "strategy = tf.distribute.MirroredStrategy()\n"
             "steps = cfg.TRAIN_SAMPLES // cfg.TRAIN.BATCH_SIZE\n"
             "with strategy.scope():\n"
             "    model = build_model()\n"
             "    model.compile(optimizer='adam', loss='mse')\n"
             "model.fit(strategy.experimental_distribute_dataset(load(cfg, 'train')), steps_per_epoch=steps)\n")
    (tmp_path / "train.py").write_text(train)
    (tmp_path / "validate.py").write_text(
        "import tensorflow as tf\nfrom loader import load\n\n"
        "def validate(strategy, cfg, model):\n"
        "    ds = strategy.experimental_distribute_dataset(load(cfg, 'val'))\n"
        "    predict = tf.function(lambda images: model(images, training=False))\n"
        "    for batch in ds:\n"
        "        outputs.append(strategy.run(predict, args=(batch,)))\n")
    monkeypatch.chdir(tmp_path)
    assert lint_paths(["."], Overrides(select=("TFD106", "TFD114"))).findings == []
    (tmp_path / "train.py").write_text(train.replace("cfg.TRAIN_SAMPLES // cfg.TRAIN.BATCH_SIZE", "1000"))
    assert [(f.path, f.line) for f in lint_paths(["."], Overrides(select=("TFD114",))).findings] == [("loader.py", 7)]


def test_a_source_from_another_module_is_reported_at_the_call_here_that_brings_it_in(tmp_path: Path, monkeypatch):
    """`train = pipeline(load(files))` in two statements: the unsharded source is `load`'s, so the finding is on
    the `load(...)` line, where sharding belongs, not on the `pipeline(...)` call given its result."""
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "data.py").write_text("""import tensorflow as tf

def load(files):
    return tf.data.TFRecordDataset(files).map(parse)

def pipeline(ds, batch_size):
    return ds.map(augment).batch(batch_size)
""")
    (tmp_path / "train.py").write_text("""import horovod.tensorflow.keras as hvd
from data import load, pipeline

def run(files):
    train = load(files)
    train = pipeline(train, 32)
    model.fit(train, epochs=10)

hvd.init()
run(["a.tfrecord"])
""")
    monkeypatch.chdir(tmp_path)
    found = lint_paths(["train.py"], Overrides(select=("TFD511",))).findings
    assert [(f.line, f.column, f.message) for f in found] == [
        (5, 13, "every Horovod rank reads this whole dataset; shard it by `hvd.rank()` or divide the steps by "
                "`hvd.size()` (the pipeline's source in `load` at data.py:4)")]


SINGLE_DEVICE_FIT = """import tensorflow as tf
from tensorflow.keras.preprocessing.image import ImageDataGenerator

def train(model, x_train, y_train):
    datagen = ImageDataGenerator(horizontal_flip=True, rotation_range=15)
    model.fit(datagen.flow(x_train, y_train, batch_size=32), epochs=10)
"""


def test_a_module_named_like_a_library_one_is_not_distributed_by_that_import(tmp_path: Path, monkeypatch):
    """cifar10.py trains on one device; cifar10_horovod.py imports Keras' `cifar10` dataset, not cifar10.py, so
    it does not make cifar10.py part of a Horovod program. A script that does import cifar10.py does."""
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "cifar10.py").write_text(SINGLE_DEVICE_FIT)
    (tmp_path / "cifar10_horovod.py").write_text("""import horovod.tensorflow.keras as hvd
from tensorflow.keras.datasets import cifar10
hvd.init()
(x_train, y_train), _ = cifar10.load_data()
""")
    monkeypatch.chdir(tmp_path)
    assert lint_paths(["cifar10.py"], Overrides(select=("TFD201",))).findings == []
    (tmp_path / "cifar10_horovod.py").write_text("""import horovod.tensorflow.keras as hvd
from cifar10 import train
hvd.init()
train(model, x_train, y_train)
""")
    found = lint_paths(["cifar10.py"], Overrides(select=("TFD201",))).findings
    assert [(f.line, f.column, f.code) for f in found] == [(6, 15, "TFD201")]


def test_a_trainer_is_not_distributed_by_another_trainer_the_same_script_may_pick(tmp_path: Path, monkeypatch):
    """run.py imports a one-device trainer and a multi-GPU one, and runs one of them: the strategy of the second
    is not the first's. A helper beside it that only makes the strategy (and trains nothing) is."""
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "single.py").write_text(SINGLE_DEVICE_FIT)
    (tmp_path / "multi.py").write_text("""import tensorflow as tf

def train(build, dataset):
    strategy = tf.distribute.MirroredStrategy()
    with strategy.scope():
        model = build()
    model.fit(dataset, epochs=10)
""")
    (tmp_path / "run.py").write_text("""import single
import multi

if args.gpus > 1:
    multi.train(build, dataset)
else:
    single.train(build(), x_train, y_train)
""")
    monkeypatch.chdir(tmp_path)
    assert lint_paths(["single.py"], Overrides(select=("TFD201",))).findings == []
    (tmp_path / "multi.py").write_text("""import tensorflow as tf

def train(build, dataset):
    return tf.distribute.MirroredStrategy()
""")
    forget_files_read()  # as the language server does when files change on disk
    found = lint_paths(["single.py"], Overrides(select=("TFD201",))).findings
    assert [(f.line, f.column, f.code) for f in found] == [(6, 15, "TFD201")]


def test_an_undistributed_dataset_from_another_module_is_cited_as_what_it_returns(tmp_path: Path, monkeypatch):
    """A loader of another module returns the pipeline whose batches `strategy.run` gets: the evidence says the
    loader returns it (a value handed in as an argument would be one it is given)."""
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "data.py").write_text("import tensorflow as tf\n\ndef make_dataset(files):\n"
                                      "    return tf.data.TFRecordDataset(files).batch(64)\n")
    (tmp_path / "train.py").write_text(
        "import tensorflow as tf\nfrom data import make_dataset\n\nstrategy = tf.distribute.MirroredStrategy()\n"
        "dataset = make_dataset(['a.tfrecord'])\nfor batch in dataset:\n    strategy.run(step, args=(batch,))\n")
    monkeypatch.chdir(tmp_path)
    assert [(f.line, f.code, f.message) for f in lint_paths(["train.py"]).findings] == [
        (7, "TFD103", "`strategy.run` gets batches from a `tf.data.Dataset` that was never distributed, not from a "
                      "distributed dataset (`make_dataset` returns a `tf.data.Dataset` that was never distributed "
                      "at line 5)")]


@pytest.mark.parametrize(("other", "reported"), [
    ("tf.distribute.OneDeviceStrategy('/device:CPU:0')", False),
    ("snt.distribute.Replicator(['/device:GPU:0', '/device:GPU:1'])", True),
])
def test_one_device_strategies_beside_a_strategy_of_another_library_still_distribute(other, reported):
    """A `OneDeviceStrategy` has one replica, so a module that makes only those trains on one device; one whose
    strategy may also come from Sonnet's `Replicator` (a MirroredStrategy the linter does not know) does not."""
    script = ("import tensorflow as tf\nimport sonnet as snt\n"
              "if n_gpus > 1:\n"
              f"    strategy = {other}\n"
              "else:\n"
              "    strategy = tf.distribute.OneDeviceStrategy('/device:GPU:0')\n"
              "ds = tf.data.TFRecordDataset(files).map(parse).batch(64).prefetch(2)\n"
              "for batch in strategy.experimental_distribute_dataset(ds):\n"
              "    strategy.run(step, args=(batch,))\n")
    assert [f.line for f in lint_text(script, select=("TFD114",))] == ([7] if reported else [])


def test_a_rank_test_made_by_a_helper_of_another_module_guards_the_write(tmp_path: Path, monkeypatch):
    """train.py saves under `if verbose:`, where `verbose` comes from utils.get_verbosity, which is
    `hvd.rank() == 0`: one rank writes. A helper that does not test the rank guards nothing."""
    (tmp_path / ".git").mkdir()
    (tmp_path / "utils.py").write_text(
        "import horovod.tensorflow as hvd\n\n\ndef get_verbosity(horovod):\n"
        "    return hvd.rank() == 0 if horovod else True\n")
    (tmp_path / "train.py").write_text(
        "import tensorflow as tf\nimport horovod.tensorflow as hvd\nfrom utils import get_verbosity\n\n"
        "hvd.init()\nverbose = get_verbosity(True)\nmodel.compile(optimizer=hvd.DistributedOptimizer(opt))\n"
        "model.fit(ds, epochs=3)\nif verbose:\n    model.save('model.keras')\n")
    monkeypatch.chdir(tmp_path)
    assert lint_paths(["train.py"], Overrides(select=("TFD510",))).findings == []
    (tmp_path / "utils.py").write_text("def get_verbosity(horovod):\n    return horovod\n")
    forget_files_read()
    assert [f.line for f in lint_paths(["train.py"], Overrides(select=("TFD510",))).findings] == [10]
