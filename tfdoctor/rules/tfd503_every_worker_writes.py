from __future__ import annotations

import re
from typing import Iterator

from tfdoctor.lint.facts import ModuleFacts
from tfdoctor.lint.findings import Severity, Violation
from tfdoctor.lint.dataflow import (
    apart_from_multi_worker, in_host_scratch, keras3_callback, keras3_file_name, multi_worker_mirrored, on_shared_storage, path_from_outside,
    runs_on_one_worker, write_kind,
)
from tfdoctor.lint.rule import Context, Rule

_LOOPBACK = re.compile(r"\b(?:localhost|127\.0\.0\.1)\b")
_LOOPBACK_BYTES = re.compile(_LOOPBACK.pattern.encode())


class EveryWorkerWrites(Rule):
    """
    ## What it does
    In a module that creates a `MultiWorkerMirroredStrategy`, finds writes that run on every worker to one
    path: `model.save`, `save_weights`, `checkpoint.save`, `tf.saved_model.save`,
    `tf.summary.create_file_writer`, and, when the code is certainly for Keras 3, the `ModelCheckpoint` and
    `TensorBoard` callbacks (Keras 2's callbacks send the non-chief workers' files to temporary directories
    themselves; Keras 3's do not). Certainly Keras 3 means a Keras 3 target that is not a guess
    (`--target-keras`, `[tool.tfdoctor]`, your project's pins, or Keras 3 APIs in the code; the installed or
    newest release is only a guess, and most multi-worker code was written for `tf.keras` of Keras 2), or a
    Keras 3 file name such as `model.keras`. Anything that may tell the workers apart keeps it silent: an `if` (or conditional
    expression) in the statement or the function on `task_type`, `task_id`, `is_chief`, the cluster resolver
    or a helper such as `_is_chief`; a path built from the task or a temporary directory (the tutorial's
    `write_filepath`); a function only called under such a test; or a path that is a parameter of a
    function this module never calls (its caller, in another module, chooses the path per worker, or none).
    A path under `/tmp` is the scratch space of each worker's own host or container, and is left alone. So is a
    write on a path that does not make the strategy: a branch that excludes the one creating it (`if
    flags.strategy is None:` beside `elif flags.strategy == "multi_worker_mirrored":`), or a method of a base
    class that the multi-worker class replaces.

    Horovod programs are reported by TFD510 instead.

    ## Why it is bad
    Under `MultiWorkerMirroredStrategy` every worker runs the same program and holds the same variables.
    Writing to one path on storage every worker sees (`gs://`, `s3://`, `hdfs://`) lets the workers
    overwrite each other's files at the same time: a corrupt or half-written checkpoint, or a race on the
    model directory that fails the job. A relative or local path is one file per host, which clashes only
    where workers share a host or a mounted disk (several workers per machine, or a network home folder): it
    is reported only where the module or its project names a loopback address (`localhost`, `127.0.0.1`),
    so that some workers run on one host, and as a warning, not an error.

    The fix keeps every worker saving (with Keras 2 a save can read sync-on-read variables, such as metrics
    and batch-norm statistics, through collective operations that every worker must join; see TFD513): the
    chief to the real path, the others to a temporary directory they may delete afterwards.

    ## Example
    ```python
    import tensorflow as tf
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        model = build_and_compile_model()
    model.fit(ds, epochs=3)
    model.save("gs://bucket/model")  # TFD503
    ```

    ## Use instead
    ```python
    import os
    import tempfile
    import tensorflow as tf
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        model = build_and_compile_model()
    model.fit(ds, epochs=3)
    task_type, task_id = strategy.cluster_resolver.task_type, strategy.cluster_resolver.task_id
    is_chief = task_type is None or task_type == "chief" or (task_type == "worker" and task_id == 0)
    path = "gs://bucket/model" if is_chief else os.path.join(tempfile.mkdtemp(), "model")
    model.save(path)
    ```
    """

    code = "TFD503"
    name = "every-worker-writes"
    severity = Severity.ERROR
    summary = "Multi-worker: models, checkpoints or summaries written to one path on every worker (no chief check)."
    MESSAGES = {  # "-host": a path not certainly on shared storage (relative or local: one file per host)
        "model": "every worker saves this model to the same path; save to a temporary directory on the other workers",
        "model-host": "every worker saves this model to one path, which clashes on a shared host or disk; use a "
                      "temporary directory on the others",
        "checkpoint": "every worker writes this checkpoint to the same path; use a temporary directory on the other workers",
        "checkpoint-host": "every worker writes this checkpoint to one path, which clashes on a shared host or disk; use "
                           "a temporary directory on the others",
        "callback": "every worker's Keras 3 callback writes the same files; give the other workers a temporary directory",
        "callback-host": "every worker's Keras 3 callback writes to one path, which clashes on a shared host or disk; give "
                         "the others a temporary directory",
        "summary": "every worker writes summaries to the same logs; give the other workers a temporary directory",
        "summary-host": "every worker writes summaries to one log folder, which clashes on a shared host or disk; give the "
                        "others a temporary directory",
    }
    triggers = ("MultiWorkerMirroredStrategy", "CollectiveAllReduceStrategy")
    INVALID = (
        """import tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    model = build_model()
    checkpoint = tf.train.Checkpoint(model=model)
for epoch in range(3):
    train_epoch()
    checkpoint.save("gs://bucket/ckpt")  # TFD503
writer = tf.summary.create_file_writer("gs://bucket/logs")  # TFD503
tf.saved_model.save(model, "gs://bucket/export")  # TFD503
""",
        # Keras 3 callbacks have no chief handling
        """import keras
import tensorflow as tf
CLUSTER = {"worker": ["localhost:12345", "localhost:23456"]}
strategy = tf.distribute.MultiWorkerMirroredStrategy()
callbacks = [keras.callbacks.ModelCheckpoint("ckpt/model.keras")]  # TFD503
model.fit(ds, callbacks=callbacks)
""",
        # a Keras 3 target chosen by the user
        """# tfdoctor: target-keras=3.8
import tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy()
model.fit(ds, callbacks=[tf.keras.callbacks.TensorBoard(log_dir="gs://bucket/logs")])  # TFD503
""",
        # the write follows a branch that makes the strategy, or a method the multi-worker class inherits
        """import tensorflow as tf
def main(flags):
    if flags.strategy == "multi_worker_mirrored":
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
    if flags.strategy == "multi_worker_mirrored" or flags.export:
        model.save("gs://bucket/model")  # TFD503
""",
        """import tensorflow as tf
class Executer:
    def train_and_eval(self):
        self.train()
        writer = tf.summary.create_file_writer("gs://bucket/logs")  # TFD503
class MultiWorkerExecuter(Executer):
    def train(self):
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
""",
        # relative paths: one file per host, which clashes where workers share one, as these do
        """import tensorflow as tf
CLUSTER = {"worker": ["localhost:12345", "localhost:23456"]}
strategy = tf.distribute.MultiWorkerMirroredStrategy()
model.fit(ds, epochs=3)
model.save("model.keras")  # TFD503
checkpoint = tf.train.Checkpoint(model=model)
checkpoint.save("ckpt/model")  # TFD503
writer = tf.summary.create_file_writer("logs")  # TFD503
""",
    )
    VALID = (
        # a relative path, and nothing says that two workers share a host: one file per host
        """import tensorflow as tf
CLUSTER = {"worker": ["10.128.0.17:12345", "10.128.0.18:12345"]}
strategy = tf.distribute.MultiWorkerMirroredStrategy()
model.fit(ds, epochs=3)
model.save_weights("weights")
""",
        # each worker's own /tmp: a Kubernetes pod (a TFJob worker) has its own
        """import tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    model = build_model()
model.fit(ds, epochs=3)
model.save("/tmp/model")
""",
        # a library's training function: the launcher that calls it chooses the path per worker
        """import tensorflow as tf
def train(model, dataset, save_dir):
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    model.fit(dataset, epochs=3)
    if save_dir:
        model.save(save_dir)
""",
        # ... also through a name made from it (the launcher passes `save_dir=""` to the workers that are not chief)
        """import os
import tensorflow as tf
def train(trainer, save_dir="logs"):
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    summary_dir = os.path.join(save_dir, "summaries", "train")
    writer = tf.summary.create_file_writer(summary_dir)
""",
        # the tutorial's helpers
        """import os
import tempfile
import tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy()
def _is_chief(task_type, task_id):
    return task_type == "worker" and task_id == 0
def write_filepath(filepath, task_type, task_id):
    dirpath = os.path.dirname(filepath)
    if not _is_chief(task_type, task_id):
        dirpath = os.path.join(tempfile.mkdtemp(), "workertemp_" + str(task_id))
    return os.path.join(dirpath, os.path.basename(filepath))
task_type, task_id = strategy.cluster_resolver.task_type, strategy.cluster_resolver.task_id
model.save(write_filepath("/tmp/keras-model", task_type, task_id))
""",
        # a job name compared with "chief" (TensorFlowOnSpark's context)
        """import tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy()
def main_fun(args, ctx):
    model.fit(ds)
    if ctx.job_name == "chief":
        model.save(args.model_dir + ".h5")
""",
        # saved on the chief only
        """import tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy()
if strategy.cluster_resolver.task_id == 0:
    model.save_weights("weights.h5")
""",
        # tf.keras of TF 2.15 (Keras 2) moves non-chief callback files itself
        """# tfdoctor: target-keras=2.15
import tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy()
callbacks = [tf.keras.callbacks.TensorBoard(log_dir="logs")]
model.fit(ds, callbacks=callbacks)
""",
        # the summaries of the path that makes no multi-worker strategy
        """import tensorflow as tf
def main(flags):
    if flags.strategy is None:
        run_config = tpu_config()
    elif flags.strategy == "multi_worker_mirrored":
        run_config = tf.estimator.RunConfig(train_distribute=tf.distribute.MultiWorkerMirroredStrategy())
    if flags.strategy is None:
        writer = tf.summary.create_file_writer("logs")
    if flags.mode == "train_and_eval":
        if flags.strategy is not None:
            raise ValueError("no strategy for train_and_eval")
        writer = tf.summary.create_file_writer("logs")
""",
        # a base class's method that the multi-worker class replaces, and one only its evaluator task runs
        """import tensorflow as tf
class Executer:
    def evaluate(self):
        writer = tf.summary.create_file_writer("eval")
    def train_and_eval(self):
        self.train()
        writer = tf.summary.create_file_writer("logs")
class MultiWorkerExecuter(Executer):
    def is_eval_task(self):
        return tf.distribute.cluster_resolver.TFConfigClusterResolver().task_type == "evaluator"
    def train(self):
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
    def train_and_eval(self):
        if self.is_eval_task():
            self.evaluate()
        else:
            self.train()
""",
        # no Keras version chosen: the callbacks may be Keras 2's
        """import tensorflow as tf
import tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy()
callbacks = [tf.keras.callbacks.TensorBoard(log_dir="logs")]
model.fit(ds, callbacks=callbacks)
""",
    )

    def check(self, facts: ModuleFacts, context: Context) -> Iterator[Violation]:
        if not multi_worker_mirrored(facts):
            return
        for call in facts.calls:
            kind = write_kind(facts, call)
            if (kind is None or (kind == "callback" and not keras3_callback(facts, call, context.targets.keras))
                    or runs_on_one_worker(facts, call) or path_from_outside(facts, call) or in_host_scratch(facts, call)
                    or apart_from_multi_worker(facts, call)):
                continue  # one worker writes, its caller picks the path, it goes to each host's own /tmp, or the
                # strategy is made on another path
            chosen = kind == "callback" and not keras3_file_name(call)
            shared = on_shared_storage(facts, call)
            if not shared and not _workers_share_a_host(facts):
                continue  # a local path on separate hosts is one file per host
            yield self.report(call, kind if shared else f"{kind}-host", severity=None if shared else Severity.WARNING,
                              assumed=context.targets.assumed("keras") if chosen else None)


def _workers_share_a_host(facts: ModuleFacts) -> bool:
    """Whether the module or another file of its project names a loopback address (`localhost:12345` in a
    `TF_CONFIG`, a launcher's `127.0.0.1`): some workers run on one host, where a local path is one file."""
    if any(_LOOPBACK.search(line) for line in facts.source_lines):
        return True
    if facts.loader is None or facts.file is None:
        return False
    return bool(facts.loader.named_elsewhere(facts.file.resolve(), _LOOPBACK_BYTES))
