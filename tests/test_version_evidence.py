"""Version evidence in the code: what the scan finds, how it ranks among the other sources of the target,
the one note for Keras 2 code under a TensorFlow whose tf.keras is Keras 3, and the exact messages of the
version projects in fixtures/projects (tests/test_fixtures.py checks all their findings)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, run_cli
from tfdoctor.config import Overrides, load_settings
from tfdoctor.lint.version_evidence import KERAS, TENSORFLOW, decide, scan
from tfdoctor.lint.version_evidence import forget as forget_project_evidence


@pytest.mark.parametrize(("source", "expected"), [
    ("import tensorflow as tf\ns.experimental_run_v2(f, args=(x,))\n", [("experimental_run_v2", 2)]),
    ("from keras.utils import multi_gpu_model\nm = multi_gpu_model(b, 2)\n",
     [("multi_gpu_model", 2), ("from keras.utils import multi_gpu_model", 1)]),
    ("import tensorflow as tf\nwith tf.Session() as s:\n    pass\n", [("tf.Session", 2)]),
    ("import tensorflow.compat.v1 as tf\nwith tf.Session() as s:\n    pass\n", []),
    ("opt = tf.train.AdamOptimizer(0.1)\n", [("tf.train optimizer", 1)]),
    ("import tensorflow as tf\nflags = tf.app.flags\ntf.logging.set_verbosity(tf.logging.INFO)\n",
     [("tf.app", 2), ("tf.logging", 3)]),
    ("import tensorflow.compat.v1 as tf\ntf.app.run(main)\n", []),  # compat.v1 runs on TF 2 too
    ("opt = keras.optimizers.SGD(lr=0.1, momentum=0.9)\n", [("optimizer lr=", 1)]),
    ("opt = keras.optimizers.SGD(learning_rate=0.1)\n", []),
    ("import tf_keras as keras\n", [("tf_keras", 1)]),
    ("model.fit(seq, epochs=3,\n          workers=4)\n", [("fit(workers=...)", 1)]),
    ("class Batches(keras.utils.PyDataset):\n    def __init__(self):\n        super().__init__(workers=4)\n",
     [("PyDataset", 1)]),
    ("from keras import ops\n", [("keras.ops", 1)]),
    ("x = 1\n# we no longer call model.fit_generator(gen)\n", []),
    ('"""Migrated from `keras.ops`-free code."""\nimport keras\n', []),
    ("import tensorflow as tf\nif tf.__version__.startswith('1'):\n    s = tf.Session()\n", []),
    ("import tensorflow as tf\nV1 = int(tf.__version__[0]) == 1\ns = tf.Session()\n", []),
    # outside a version test whose branches only pick imports, the evidence stands; inside them, where a branch
    # runs other code, and where a helper reads the version (which code it decides is not in sight), it does not
    ("import tensorflow as tf\nif tf.__version__.startswith('1'):\n    import keras\n    from keras.layers import Dense\n"
     "else:\n    from tensorflow import keras\nopt = keras.optimizers.Adam(lr=0.1)\n", [("optimizer lr=", 7)]),
    ("import tensorflow as tf\nV = tf.__version__.split('.')\nif int(V[0]) < 2:\n    import keras\nelif int(V[1]) < 4:\n"
     "    from tensorflow.python.keras import models\nopt = Adam(lr=0.1)\n", [("optimizer lr=", 7)]),
    ("import tensorflow as tf\nif tf.__version__.startswith('1'):\n    s = tf.Session()\nopt = Adam(lr=0.1)\n", []),
    ("import tensorflow as tf\ndef is_tf1():\n    return tf.__version__.startswith('1')\nopt = Adam(lr=0.1)\n", []),
    # a version printed, not decided on, leaves the evidence standing
    ("import tensorflow as tf\nlogging.info('TF Version: {}'.format(tf.__version__))\ns = tf.Session()\n",
     [("tf.Session", 3)]),
    ("import tensorflow as tf\nprint('Using TensorFlow version:', tf.__version__)\nds = ds.map(f, num_parallel_calls="
     "tf.data.AUTOTUNE)\n", [("tf.data.AUTOTUNE", 3)]),  # `print(` is no `int(`
    ("ds = ds.prefetch(tf.data.AUTOTUNE)\n", [("tf.data.AUTOTUNE", 1)]),
    ("d = s.experimental_distribute_datasets_from_function(fn)\n",
     [("experimental_distribute_datasets_from_function", 1)]),
    ("lstm.reset_states()\nfor m in metrics:\n    m.reset_states()\n", []),  # RNN layers keep it in Keras 3
    ("model.reset_states()\ntrain_accuracy.reset_states()\n", [("metric.reset_states()", 2)]),
    ("model.fit_generator(gen, samples_per_epoch=n, nb_epoch=3)\n", [("Keras 1 arguments", 1), ("fit_generator", 1)]),
    ("x = Convolution2D(64, 3, 3, border_mode='same')(x)\n", [("Keras 1 arguments", 1)]),
    ("lr = K.get_value(model.optimizer.lr)\nsched = optimizer.lr_schedule\n", [("optimizer.lr", 1)]),
    ("sched = self.optimizer.lr_schedule\n", []),  # not the Keras 2 attribute
    ("cb = ModelCheckpoint(os.path.join(d, 'w.h5'), save_best_only=True,\n    period=1)\n",
     [("ModelCheckpoint(period=...)", 1)]),
    ("import time\nstart = time.clock()\n", [("time.clock()", 2)]),  # Python <= 3.7: never Keras 3
    ("from keras.engine.training import Model\n", [("keras.engine", 1)]),  # standalone Keras 1 and 2 only
    ("from keras.engine.topology import Layer\n", [("keras.engine.topology", 1), ("keras.engine", 1)]),  # < 2.4
    ("preds = self.predict_generator(gen)\nm.evaluate_generator(gen)\n", [("evaluate_generator", 2)]),
    ("import sys, time\nnow = time.clock() if sys.version_info < (3, 8) else time.perf_counter()\n", []),
    ("model.compile(opt, loss, experimental_run_tf_function=False)\n",
     [("compile(experimental_run_tf_function=...)", 1)]),
    ("class NovoGrad(OptimizerV2):\n    def __init__(self):\n        self._set_hyper('beta_1', 0.9)\n",
     [("OptimizerV2 internals", 3)]),
    ("from keras_applications import resnet\n", [("keras_applications", 1)]),
])
def test_scan_finds_the_first_use_of_each_api_outside_comments_and_docstrings(source, expected):
    assert [(s.api.name, s.line) for s in scan(source.encode(), "t.py")] == expected


def test_decide_intersects_the_ranges_and_cites_the_narrowest():
    sightings = scan(b"opt.get_scaled_loss(l)\nimport keras.backend.tensorflow_backend as tb\n", "a.py")
    keras = decide(sightings, KERAS)
    assert (keras.low, keras.high) == ((2,), (2, 3))
    assert keras.sighting.cited == "`keras.backend.tensorflow_backend` at a.py:2"
    assert decide(sightings, TENSORFLOW) is None
    assert decide(scan(b"from keras import ops\nopt.get_scaled_loss(l)\n", "b.py"), KERAS) is None  # contradicts


def _project(tmp_path: Path, files: dict[str, str]) -> Path:
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / "setup.cfg").write_text("[metadata]\nname = p\n")
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return tmp_path


KERAS2_HELPER = "def scaled(opt, loss):\n    return opt.get_scaled_loss(loss)\n"


def test_code_ranks_below_pins_and_above_the_installed_packages(tmp_path):
    files = {"helpers.py": KERAS2_HELPER, "train.py": "import tensorflow as tf\n"}
    project = _project(tmp_path / "evidence", files)
    keras = load_settings(project).for_file(project / "train.py").targets.keras
    assert (keras.text, keras.source, keras.kind) == ("2", f"`get_scaled_loss` at {project / 'helpers.py'}:2", "code")
    pinned = _project(tmp_path / "pinned", {**files, "requirements.txt": "keras==3.5.0\n"})
    keras = load_settings(pinned).for_file(pinned / "train.py").targets.keras
    assert (keras.text, keras.kind) == ("3.5.0", "pin")


def test_a_sibling_folder_is_another_program_whose_versions_do_not_count(tmp_path):
    project = _project(tmp_path, {"course/week1/session.py": "import tensorflow as tf\nsess = tf.Session()\n",
                                  "course/week2/train.py": "import tensorflow as tf\n",
                                  "course/week2/model/net.py": "import tensorflow as tf\n",
                                  "course/helpers.py": KERAS2_HELPER})
    settings = load_settings(project)
    week2 = settings.for_file(project / "course/week2/train.py").targets
    assert week2.tensorflow.kind != "code"  # week1's `tf.Session` is another program's
    assert (week2.keras.kind, week2.keras.source) == ("code", f"`get_scaled_loss` at {project / 'course/helpers.py'}:2")
    nested = settings.for_file(project / "course/week2/model/net.py").targets
    assert (nested.keras.kind, nested.tensorflow.kind != "code") == ("code", True)
    assert settings.for_file(project / "course/week1/session.py").targets.tensorflow.kind == "code"
    (project / "common").mkdir()
    (project / "common" / "__init__.py").write_text("import tensorflow as tf\nsess = tf.Session()\n")
    (project / "course/week2/uses_common.py").write_text("import tensorflow as tf\nfrom common import sess\n")
    forget_project_evidence()
    imports = load_settings(project).for_file(project / "course/week2/uses_common.py").targets.tensorflow
    assert (imports.kind, imports.source) == ("code", f"`tf.Session` at {project / 'common/__init__.py'}:2")


def test_generator_methods_are_keras_2_code_told_only_when_keras_3_is_chosen(tmp_path):
    # only Keras 2 has `fit_generator`: code that calls it runs there (the run's note says so); chosen Keras 3, the
    # call fails (also standalone Keras's, whose `fit` takes no generator before Keras 2.4)
    project = _project(tmp_path, {"standalone/train.py": "import keras\nmodel.fit_generator(gen(), steps_per_epoch=9)\n",
                                  "tfkeras/train.py": "import tensorflow as tf\nmodel.fit_generator(gen(), steps_per_epoch=9)\n",
                                  "mixed/train.py": "from keras.models import Model\nfrom tensorflow.keras.optimizers "
                                                    "import Adam\nmodel.fit_generator(gen(), steps_per_epoch=9)\n"})
    result = run_cli("lint", "--no-cache", "--format", "concise", "--select", "TFD401", "--target-tensorflow", "2.16",
                     ".", cwd=project)
    assert result.stdout.splitlines() == []
    assert "Keras 2 code (`fit_generator` at " in result.stderr  # under TF 2.16, whose `tf.keras` is Keras 3
    # Keras 2.6 chosen: the deprecated alias runs there; Keras 3 chosen: the call fails
    pinned = run_cli("lint", "--no-cache", "--format", "concise", "--select", "TFD401", "--target-keras", "2.6",
                     "standalone", cwd=project)
    assert pinned.stdout.splitlines() == []
    chosen = run_cli("lint", "--no-cache", "--format", "concise", "--select", "TFD401", "--target-keras", "3",
                     "standalone", cwd=project)
    assert chosen.stdout.splitlines() == [
        "standalone/train.py:2:1: TFD401 `fit_generator` is removed in Keras 3; use `fit` (Keras 3 assumed: "
        "--target-keras)"]


def test_generator_methods_under_a_chosen_keras_3_are_not_cited_as_their_own_evidence(tmp_path):
    # two files whose only sign of Keras 2 is each other's generator method, under Keras 3 chosen by the user:
    # each finding cites the choice, not the other file's call it contradicts
    project = _project(tmp_path, {"a.py": "import tensorflow as tf\nmodel.fit_generator(gen(), steps_per_epoch=9)\n",
                                  "b.py": "import tensorflow as tf\nmodel.evaluate_generator(gen(), steps=9)\n"})
    result = run_cli("lint", "--no-cache", "--format", "concise", "--select", "TFD401", "--target-keras", "3", ".",
                     cwd=project)
    assert result.stdout.splitlines() == [
        "a.py:2:1: TFD401 `fit_generator` is removed in Keras 3; use `fit` (Keras 3 assumed: --target-keras)",
        "b.py:2:1: TFD401 `evaluate_generator` is removed in Keras 3; use `evaluate` (Keras 3 assumed: "
        "--target-keras)"]
    # nothing chosen: they are Keras 2 code, where the calls run (deprecated aliases), which the run's note says
    assert run_cli("lint", "--no-cache", "--format", "concise", "--select", "TFD401", ".", cwd=project).stdout == ""


def test_keras2_code_under_a_tf216_pin_gets_one_note_and_target_keras_3_lists_the_breakage(tmp_path):
    project = _project(tmp_path, {
        "requirements.txt": "tensorflow==2.16.1\n",
        "a.py": "import tensorflow as tf\ng = opt.get_unscaled_gradients(opt.get_scaled_loss(l))\n",
        "b.py": "import tensorflow as tf\ns = opt.get_scaled_loss(l)\n",
    })
    result = run_cli("lint", "--no-cache", "--format", "concise", ".", cwd=project)
    assert result.returncode == 0 and result.stdout == ""
    notes = [line for line in result.stderr.splitlines() if line.startswith("note:")]
    assert notes == ["note: a.py: Keras 2 code (`get_scaled_loss` at a.py:2) under TensorFlow 2.16.1 "
                     "(requirements.txt: tensorflow==2.16.1): `tf.keras` is Keras 3 from TF 2.16, so this code needs "
                     "`tf_keras` with TF_USE_LEGACY_KERAS=1, or migrating; `--target-keras 3` lists what migrating "
                     "would break (and 1 more file)"]
    migrating = run_cli("lint", "--no-cache", "--format", "concise", "--target-keras", "3", ".", cwd=project)
    assert migrating.returncode == 1 and "note:" not in migrating.stderr
    assert migrating.stdout.splitlines() == [
        "a.py:2:5: TFD403 `get_unscaled_gradients` is removed in Keras 3; drop it, `apply_gradients` unscales the "
        "gradients itself (Keras 3 assumed: --target-keras)",
        "a.py:2:32: TFD403 `get_scaled_loss` is removed in Keras 3; use `optimizer.scale_loss(loss)` (Keras 3 "
        "assumed: --target-keras)",
        "b.py:2:5: TFD403 `get_scaled_loss` is removed in Keras 3; use `optimizer.scale_loss(loss)` (Keras 3 "
        "assumed: --target-keras)",
    ]


def test_code_that_imports_tf_keras_gets_no_note(tmp_path):
    project = _project(tmp_path, {"requirements.txt": "tensorflow==2.17\n",
                                  "a.py": "import tensorflow as tf\nimport tf_keras\ns = opt.get_scaled_loss(l)\n"})
    result = run_cli("lint", "--no-cache", ".", cwd=project)
    assert result.returncode == 0 and "note:" not in result.stderr


def test_show_target_lists_the_evidence(tmp_path):
    project = _project(tmp_path, {"helpers.py": KERAS2_HELPER,
                                  "train.py": "import tensorflow as tf\nstrategy.experimental_run_v2(f)\n"})
    result = run_cli("lint", "--show-target", "train.py", cwd=project)
    assert result.returncode == 0
    assert result.stdout.splitlines() == [
        "train.py:",
        "  TensorFlow <= 2.1  (from `experimental_run_v2` at train.py:2)",
        "  Keras 2  (from `get_scaled_loss` at helpers.py:2)",
        "  evidence in the code:",
        "    `experimental_run_v2` at train.py:2: TF <= 2.1",
        "    `get_scaled_loss` at helpers.py:2: Keras 2",
    ]


MESSAGES = {
    "keras2_under_tf217": "train.py:20:16: TFD104 the loss of replica function `replica_step` is a default-reduction "
                          "Keras loss, so its summed gradients are N times too large "
                          "(Keras 2 assumed: `get_scaled_loss` at scaling.py:5)",
    "keras3_project": "train.py:18:5: TFD304 `optimizer` is first built inside the distributed step `replica_step`; "
                      "build it in `strategy.scope()` (Keras 3 assumed: `keras.ops` at layers.py:4)",
    "keras3_multi_worker_api": "train.py:33:5: TFD518 `model.fit` fails under Keras 3 for a model built in the "
                               "`MultiWorkerMirroredStrategy` scope at line 29 (Keras 3 assumed: `keras.ops` at "
                               "layers.py:4)",
    "keras3_multi_worker_pin": "train.py:21:1: TFD518 `multi_worker_model.fit` fails under Keras 3 for a model built "
                               "in the `MultiWorkerMirroredStrategy` scope at line 18 (Keras 3.8.0 assumed: "
                               "requirements.txt: keras==3.8.0)",
    "tf21_custom_loop": "train.py:19:46: TFD202 `map` in a training pipeline runs on one core; add "
                        "`num_parallel_calls=tf.data.experimental.AUTOTUNE`",
}


@pytest.mark.parametrize("name", sorted(MESSAGES))
def test_version_dependent_findings_say_which_evidence_they_used(name):
    result = run_cli("lint", "--no-cache", "--format", "concise", ".", cwd=FIXTURES / "projects" / name)
    assert result.stdout.splitlines()[0] == MESSAGES[name]


FIT_UNDER_MULTI_WORKER = """import tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
model.fit(dataset, epochs=2)
"""


@pytest.mark.parametrize(("name", "requirements", "arguments", "reported"), [
    ("guess", None, (), False),  # Keras 3 only as the installed or newest release
    ("tf-pin", "tensorflow==2.17.0\n", (), False),  # Keras 3 only as what tf.keras of TF 2.17 would be
    ("before-3.5", "keras==3.4.1\n", (), False),
    ("pin", "keras==3.6.0\n", (), True),
    ("command-line", None, ("--target-keras", "3"), True),
    ("tf-2.15", None, ("--target-keras", "3", "--target-tensorflow", "2.15"), False),
])
def test_keras3_fit_under_multi_worker_needs_keras3_chosen_not_guessed(tmp_path, name, requirements, arguments,
                                                                       reported):
    files = {"train.py": FIT_UNDER_MULTI_WORKER, **({"requirements.txt": requirements} if requirements else {})}
    project = _project(tmp_path / name, files)
    result = run_cli("lint", "--no-cache", "--format", "concise", "--select", "TFD518", *arguments, ".", cwd=project)
    assert [line.split(" fails ")[0] for line in result.stdout.splitlines()] == (
        ["train.py:6:1: TFD518 `model.fit`"] if reported else [])


def test_fixes_spell_autotune_as_the_evidenced_tensorflow_does():
    result = run_cli("lint", "--diff", ".", cwd=FIXTURES / "projects" / "tf21_custom_loop")
    added = [line for line in result.stdout.splitlines() if line.startswith("+ ")]
    assert added == [
        "+    dataset = tf.data.TFRecordDataset(files).map(parse_example, "
        "num_parallel_calls=tf.data.experimental.AUTOTUNE).batch(BATCH)  # expect: TFD202",
        "+    eval_model.fit(tf.data.TFRecordDataset(files).map(parse_example, num_parallel_calls=8).shuffle(1024).batch(64)"
        ".prefetch(tf.data.experimental.AUTOTUNE))  # expect: TFD203",
    ]


def test_profiling_a_script_takes_version_evidence_from_the_files_it_runs_only(tmp_path, monkeypatch):
    """`tfdoctor profile -- python train.py` lints what runs: a Keras 2 copy of the script lying beside it
    (`original.py`, imported by nothing) must not decide which Keras train.py was written for."""
    from tfdoctor.profile.script.join import lint_findings

    train = (FIXTURES / "projects" / "keras3_project" / "train.py").read_text()
    project = _project(tmp_path, {
        "original.py": "import tensorflow as tf\nloss = opt.get_scaled_loss(loss)\n",
        "layers.py": "from keras import ops\n",
        "train.py": train.replace("import tensorflow as tf\n", "import tensorflow as tf\nimport layers\n", 1),
    })
    monkeypatch.chdir(project)
    keras = load_settings(project).for_file(project / "train.py").targets.keras
    assert keras.kind != "code"  # linted as a folder, the copy and layers.py contradict each other
    [finding] = lint_findings(project / "train.py")
    assert (finding.code, finding.path, finding.line) == ("TFD304", "train.py", 19)
    assert finding.message.endswith("(Keras 3 assumed: `keras.ops` at layers.py:1)")


def _notebook(cells: list[tuple[str, list[dict]]]) -> str:
    return json.dumps({"nbformat": 4, "nbformat_minor": 2, "metadata": {}, "cells": [
        {"cell_type": "code", "metadata": {}, "execution_count": None, "source": source, "outputs": outputs}
        for source, outputs in cells]})


def test_a_notebook_that_shows_the_keras_it_ran_under_is_judged_by_it(tmp_path):
    shown = ("import keras\nkeras.__version__", [{"output_type": "execute_result", "execution_count": 1,
                                                   "metadata": {}, "data": {"text/plain": ["'2.0.8'"]}}])
    fit = ("model.fit_generator(batches, steps_per_epoch=100, epochs=30)", [])
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "book.ipynb").write_text(_notebook([shown, fit]))
    (tmp_path / "unrun.ipynb").write_text(_notebook([("from tensorflow import keras\nkeras.__version__", []), fit]))
    # standalone Keras 2.0.8, shown by its output; the unrun one shows only its `fit_generator`
    settings = load_settings(tmp_path)
    book, unrun = (settings.for_file(tmp_path / name).targets.keras for name in ("book.ipynb", "unrun.ipynb"))
    assert (book.text, book.source) == ("2.0.8", f"`keras.__version__ shown as 2.0.8` at {tmp_path / 'book.ipynb'}:cell 1:2")
    assert unrun.source == f"`fit_generator` at {tmp_path / 'unrun.ipynb'}:cell 2:1"


def test_a_notebook_whose_output_shows_multi_backend_keras_is_judged_by_it(tmp_path):
    banner = ("import keras", [{"output_type": "stream", "name": "stderr", "text": ["Using TensorFlow backend.\n"]}])
    trace = ("model.fit_generator(batches, steps_per_epoch=100, epochs=30)", [{
        "output_type": "error", "ename": "KeyboardInterrupt", "evalue": "", "traceback": [
            "\x1b[0;32m/opt/conda/lib/python3.7/site-packages/keras/legacy/interfaces.py\x1b[0m in \x1b[0;36mwrapper\x1b[0m"]}])
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "banner.ipynb").write_text(_notebook([banner]))
    (tmp_path / "trace.ipynb").write_text(_notebook([("import keras", []), trace]))
    (tmp_path / "unrun.ipynb").write_text(_notebook([("import keras", []), (trace[0], [])]))
    keras = {name: next(line for line in run_cli("lint", "--show-target", name, cwd=tmp_path).stdout.splitlines()
                        if line.startswith("  Keras"))
             for name in ("banner.ipynb", "trace.ipynb", "unrun.ipynb")}
    # multi-backend Keras (<= 2.3) printed its banner, or the call ran through its modules
    assert keras["banner.ipynb"] == "  Keras <= 2.3  (from `multi-backend Keras in a cell's output` at banner.ipynb:cell 1:1)"
    assert keras["trace.ipynb"] == "  Keras <= 2.3  (from `multi-backend Keras in a cell's output` at trace.ipynb:cell 2:1)"
    assert "<= 2.3" not in keras["unrun.ipynb"]


def test_a_cell_that_prints_each_version_on_its_own_line_gives_each(tmp_path):
    printed = ("import tensorflow as tf\nprint(tf.__version__)\nprint(tf.keras.__version__)\n\n"
               "tf.debugging.set_log_device_placement(True)",
               [{"output_type": "stream", "name": "stdout", "text": ["2.0.0\n", "2.2.4-tf\n"]}])
    fit = ("model.fit_generator(batches, steps_per_epoch=100, epochs=30)", [])
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "book.ipynb").write_text(_notebook([printed, fit]))
    targets = load_settings(tmp_path).for_file(tmp_path / "book.ipynb").targets
    assert (targets.tensorflow.kind, targets.tensorflow.source) == (
        "code", f"`tf.__version__ shown as 2.0.0` at {tmp_path / 'book.ipynb'}:cell 1:2")
    assert targets.keras.source.startswith("`tf.keras.__version__ shown as 2.2.4`")
    # a third print that is not a version: the outputs cannot be told apart, so nothing is read from them
    (tmp_path / "book.ipynb").write_text(_notebook([(printed[0] + "\nprint('ready')", printed[1]), fit]))
    assert load_settings(tmp_path).for_file(tmp_path / "book.ipynb").targets.tensorflow.kind != "code"


def test_a_notebook_that_installs_its_tensorflow_is_judged_by_that_version(tmp_path):
    """`!pip install -q tensorflow-gpu==2.0.0-alpha0` in a notebook's first cell: TF 2.0, where `fit_generator`
    is the way to train on a generator (TFD401 is for TF 2.1 and later). Colab's `%tensorflow_version 1.x` says
    TF 1. A range (`tensorflow>=2.4`) or an unpinned install says nothing."""
    fit = ("model.fit_generator(batches, steps_per_epoch=100, epochs=30)", [])
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "alpha.ipynb").write_text(_notebook([
        ("!pip install -q tensorflow-gpu==2.0.0-alpha0 tensorflow_datasets\nimport tensorflow as tf", []), fit]))
    (tmp_path / "colab.ipynb").write_text(_notebook([("%tensorflow_version 1.x\nimport tensorflow as tf", []), fit]))
    (tmp_path / "range.ipynb").write_text(_notebook([("%pip install 'tensorflow>=2.4' keras\nimport tensorflow as tf",
                                                      []), fit]))
    settings = load_settings(tmp_path)
    alpha = settings.for_file(tmp_path / "alpha.ipynb").targets.tensorflow
    assert (alpha.kind, alpha.source) == (
        "code", f"`pip install tensorflow-gpu==2.0.0-alpha0` at {tmp_path / 'alpha.ipynb'}:cell 1:1")
    colab = settings.for_file(tmp_path / "colab.ipynb").targets.tensorflow
    assert (colab.kind, colab.label) == ("code", "1")
    assert settings.for_file(tmp_path / "range.ipynb").targets.tensorflow.kind != "code"


def test_a_notebook_last_run_under_python_before_3_9_is_not_keras_3(tmp_path):
    """A Kaggle notebook saved from a Python 3.6.4 kernel ran TF <= 2.6 and Keras 2 (Keras 3 needs Python 3.9),
    where `fit_generator` runs. Python 3.10 allows any TensorFlow of today, so that kernel bounds nothing."""
    fit = ("from tensorflow import keras\nmodel.fit_generator(batches, steps_per_epoch=100, epochs=30)", [])
    (tmp_path / "pyproject.toml").write_text("")
    for name, version in (("kaggle.ipynb", "3.6.4"), ("recent.ipynb", "3.10.12")):
        book = json.loads(_notebook([fit]))
        book["metadata"] = {"language_info": {"name": "python", "version": version}}
        (tmp_path / name).write_text(json.dumps(book))
    targets = load_settings(tmp_path).for_file(tmp_path / "kaggle.ipynb").targets
    assert (targets.tensorflow.kind, targets.tensorflow.label, targets.tensorflow.source) == (
        "code", "<= 2.6", f"`the notebook's Python 3.6.4 kernel` at {tmp_path / 'kaggle.ipynb'}:cell 1:1")
    assert (targets.keras.kind, targets.keras.label) == ("code", "2")
    recent = load_settings(tmp_path).for_file(tmp_path / "recent.ipynb").targets
    assert recent.tensorflow.kind != "code"


def test_a_script_above_counts_only_when_it_imports_the_branch(tmp_path):
    session = "import tensorflow as tf\nsess = tf.InteractiveSession()\nprint(sess)\n"
    project = _project(tmp_path, {"examples/onnx_demo.py": session,  # a script above, importing nothing below
                                  "examples/quantized/train.py": "import tensorflow as tf\n",
                                  "models/net.py": "import tensorflow as tf\n",
                                  "train.py": "from models import net\n" + session})
    settings = load_settings(project)
    assert settings.for_file(project / "examples/quantized/train.py").targets.tensorflow.kind != "code"
    model = settings.for_file(project / "models/net.py").targets.tensorflow  # the root script imports models
    assert (model.kind, model.source) == ("code", f"`tf.Session` at {project / 'train.py'}:3")


def test_a_script_elsewhere_that_imports_the_module_is_its_evidence(tmp_path):
    """A training script in another folder that imports the module (through `sys.path`) runs it: its Keras 2
    optimizer (`Adam(lr=...)`) is the evidence of that module and of the other modules of its package; another
    folder of the same name, whose modules the script does not name, is another program."""
    step = "import tensorflow as tf\n\n\ndef train_step(x):\n    return x\n"
    script = "import sys\nsys.path.append('../lib')\nfrom utils.steps import train_step\nopt = Adam(lr=1e-4)\n"
    project = _project(tmp_path, {"lib/utils/steps.py": step, "scripts/run/train.py": script,
                                  "lib/utils/other.py": step, "examples/utils/helpers.py": step})
    settings = load_settings(project)
    cited = ("code", f"`optimizer lr=` at {project / 'scripts/run/train.py'}:4")
    for module in ("lib/utils/steps.py", "lib/utils/other.py"):
        keras = settings.for_file(project / module).targets.keras
        assert (keras.kind, keras.source) == cited
    assert settings.for_file(project / "examples/utils/helpers.py").targets.keras.kind != "code"


def test_a_notebook_takes_no_evidence_from_the_scripts_beside_it(tmp_path):
    """A notebook is a program of its own: a TF 1 script beside it says nothing of its versions, and a script
    above a folder (`with tf.Session() as sess:` at its top level) says nothing of a folder it does not import;
    a module the notebook imports does."""
    session = "import tensorflow as tf\nwith tf.Session() as sess:\n    sess.run(op)\n"
    project = _project(tmp_path, {"keras_tf_mnist.py": session, "text/helpers.py": "import tensorflow as tf\n",
                                  "lib/steps.py": "import tensorflow as tf\nsess = tf.Session()\n"})
    (project / "book.ipynb").write_text(_notebook([("import tensorflow as tf\nds = tf.data.Dataset.range(4)", [])]))
    (project / "uses_lib.ipynb").write_text(_notebook([("from lib import steps", [])]))
    settings = load_settings(project)
    assert settings.for_file(project / "book.ipynb").targets.tensorflow.kind != "code"
    assert settings.for_file(project / "text/helpers.py").targets.tensorflow.kind != "code"
    imported = settings.for_file(project / "uses_lib.ipynb").targets.tensorflow
    assert (imported.kind, imported.source) == ("code", f"`tf.Session` at {project / 'lib/steps.py'}:2")


def test_a_test_module_of_an_imported_package_is_no_evidence_for_the_files_it_does_not_test(tmp_path):
    """A TF 2 library's TF 1 compatibility test (`tf.Session` in `estimator/adversarial_test.py`) runs alone,
    under its test runner: a notebook that imports the library, and the library's own modules, are not TF 1
    for it. The test module itself is judged by what it uses."""
    session = "import tensorflow as tf\nwith tf.Session() as sess:\n    sess.run(op)\n"
    project = _project(tmp_path, {"nsl/__init__.py": "", "nsl/estimator/adversarial.py": "import tensorflow as tf\n",
                                  "nsl/estimator/adversarial_test.py": session, "nsl/tests/test_keras.py": session})
    (project / "book.ipynb").write_text(_notebook([("import nsl\nimport tensorflow as tf", [])]))
    settings = load_settings(project)
    assert settings.for_file(project / "book.ipynb").targets.tensorflow.kind != "code"
    assert settings.for_file(project / "nsl/estimator/adversarial.py").targets.tensorflow.kind != "code"
    tested = settings.for_file(project / "nsl/estimator/adversarial_test.py").targets.tensorflow
    assert (tested.kind, tested.label) == ("code", "1")


def test_a_keras_3_only_claim_needs_more_than_the_installed_keras_except_in_a_profiles_run(tmp_path, monkeypatch):
    """Nothing in the project says which Keras: the installed one is a guess, and TFD304 (Keras 3 only) stays
    silent when the code is linted; a profile's run meets the installed Keras, so there it reports."""
    from tfdoctor.profile.script.join import lint_findings

    train = (FIXTURES / "projects" / "keras3_project" / "train.py").read_text()
    project = _project(tmp_path, {"train.py": train})
    monkeypatch.chdir(project)
    assert load_settings(project).for_file(project / "train.py").targets.keras.kind in ("installed", "newest")
    linted = run_cli("lint", "--no-cache", "--format", "concise", "--select", "TFD304", "train.py", cwd=project)
    assert linted.stdout == ""
    [finding] = lint_findings(project / "train.py")
    assert (finding.code, finding.path, finding.line) == ("TFD304", "train.py", 18)
