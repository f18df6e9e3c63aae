from __future__ import annotations

import io
import re
import tokenize
from typing import Iterator

from tfdoctor.lint.facts import ModuleFacts, reads
from tfdoctor.lint.findings import Severity, Violation
from tfdoctor.lint.dataflow import horovod_init, horovod_place_sets, trains
from tfdoctor.lint.rule import Context, Rule

# Pinning shows as a call such as `set_visible_devices(...)` or `tf.device(...)`, a `visible_device_list` set
# or passed, a helper of the project named for GPUs or devices (`setup_gpus()`), or the environment variable.
_PINNING_CALL = re.compile(r"visible_device|^device$", re.IGNORECASE)
_HELPER_CALL = re.compile(r"gpu|device", re.IGNORECASE)
_PINNED_STRING = "CUDA_VISIBLE_DEVICES"
_SCHEDULED_STRING = "TF_CONFIG"  # a scheduler's task: one process per container


class HvdGpuNotPinned(Rule):
    """
    ## What it does
    Finds `hvd.init()` in a module that never pins a GPU per process: no `set_visible_devices`, no
    `visible_device_list` (on a session config that is then used), no `tf.device(...)`, no
    `CUDA_VISIBLE_DEVICES`. Calling `hvd.local_rank()` for something else (a log line), or setting the device
    list on a config that never reaches a session, does not pin anything. A module that calls a helper of its own named for
    GPUs or devices (`setup_gpus()`), or a function of another project module that pins devices
    (`setup.set_flags(...)` in `utils/setup.py`), is left alone, and so is a module that does not train (no `fit`,
    `compile`, `apply_gradients`, `minimize` or Estimator training): a library or a helper of the training
    script. A process
    that a scheduler places, one per container or worker (the module sets `HOROVOD_RANK` and
    `HOROVOD_LOCAL_RANK` itself, or is a task given its own `TF_CONFIG`, as tf-yarn's are), is left alone
    too: how many processes share a host's GPUs is then up to the scheduler, not in the code. So is a module
    that sizes TensorFlow's CPU thread pools (`intra_op_parallelism_threads`) and names no GPU or CUDA
    anywhere, or sets OpenMP's (`OMP_NUM_THREADS`, `KMP_AFFINITY`) or checks for Intel's oneDNN build
    (`IsMklEnabled()`) and names none: a CPU run (Intel's Horovod trainers), with no GPU to share. Nor is a
    module that a project module importing it (directly or through two more) runs in a session pinned per rank
    (`visible_device_list = str(hvd.local_rank())`): the session that runs its graph is made there.

    ## Why it is bad
    Horovod starts one process per GPU but does not choose the GPU: TensorFlow in every process takes all
    visible GPUs and places its work on GPU 0. The processes of a host then share one GPU (and reserve memory
    on all of them), and the other GPUs idle.

    ## Example
    ```python
    import tensorflow as tf
    import horovod.tensorflow.keras as hvd
    hvd.init()  # TFD509
    model = tf.keras.Sequential([tf.keras.layers.Dense(10)])
    model.compile(optimizer=hvd.DistributedOptimizer(tf.keras.optimizers.Adam()), loss="mse")
    ```

    ## Use instead
    ```python
    import tensorflow as tf
    import horovod.tensorflow.keras as hvd
    hvd.init()
    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        tf.config.set_visible_devices(gpus[hvd.local_rank()], "GPU")
    model = tf.keras.Sequential([tf.keras.layers.Dense(10)])
    model.compile(optimizer=hvd.DistributedOptimizer(tf.keras.optimizers.Adam()), loss="mse")
    ```
    """

    code = "TFD509"
    name = "hvd-gpu-not-pinned"
    severity = Severity.WARNING
    OPT_IN = True  # reviews 27 and 30-34 judged 4 of its 16 findings useful (CPU, one-process, demo scripts)
    summary = "Horovod: GPUs are not pinned to `hvd.local_rank()`, so every process uses GPU 0."
    MESSAGES = {"default": "no GPU is pinned to `hvd.local_rank()` after `hvd.init()`, so every process on a host uses GPU 0"}
    triggers = ("horovod",)
    INVALID = (
        """import horovod.tensorflow as hvd
import tensorflow as tf
def main():
    hvd.init()  # TFD509
    model = tf.keras.Sequential()
    model.compile("sgd", "mse")
""",
        # local_rank only decides who prints
        """import tensorflow as tf
import horovod.tensorflow as hvd
hvd.init()  # TFD509
gpus = tf.config.list_physical_devices("GPU")
if hvd.local_rank() == 0:
    print(gpus)
opt.apply_gradients(grads)
""",
        """from horovod import tensorflow as hvd
hvd.init()  # TFD509
model.fit(ds)
""",
        # the config is never given to a session
        """import tensorflow.compat.v1 as tf
import horovod.tensorflow as hvd
hvd.init()  # TFD509
config = tf.ConfigProto()
config.gpu_options.visible_device_list = str(hvd.local_rank())
train_op = hvd.DistributedOptimizer(tf.train.AdamOptimizer(0.001)).minimize(loss)
with tf.Session() as sess:
    sess.run(train_op)
""",
        # an Estimator trained on every rank, with no session config
        """import horovod.tensorflow as hvd
import tensorflow as tf
from model import model_fn
hvd.init()  # TFD509
estimator = tf.estimator.Estimator(model_fn=model_fn, model_dir="checkpoints")
estimator.train(input_fn=train_fn, hooks=[hvd.BroadcastGlobalVariablesHook(0)])
""",
    )
    VALID = (
        # a Flyte MPI task that requests CPUs and memory, no GPU
        """import tensorflow as tf
from flytekit import Resources, task
@task(requests=Resources(cpu="1", mem="1000Mi"), limits=Resources(cpu="2"))
def horovod_train_task(batch_size: int):
    import horovod.tensorflow as hvd
    hvd.init()
    model = build_model()
    model.compile(optimizer=hvd.DistributedOptimizer(tf.keras.optimizers.SGD(0.01)), loss="mse")
    model.fit(make_dataset(batch_size), epochs=1)
""",
        # CPU thread pools sized, no GPU named anywhere: a CPU run
        """import tensorflow as tf
import horovod.tensorflow as hvd
hvd.init()
train_op = hvd.DistributedOptimizer(tf.compat.v1.train.AdamOptimizer(0.001)).minimize(loss)
config = tf.compat.v1.ConfigProto(inter_op_parallelism_threads=2, intra_op_parallelism_threads=FLAGS.intra)
with tf.compat.v1.train.MonitoredTrainingSession(hooks=hooks, config=config) as sess:
    sess.run(train_op)
""",
        # pinning commented out: a CPU run on purpose
        """import tensorflow as tf
import horovod.tensorflow as hvd
hvd.init()
config = tf.ConfigProto(intra_op_parallelism_threads=flags.intraop)
# config.gpu_options.visible_device_list = str(hvd.local_rank())
with tf.train.MonitoredTrainingSession(hooks=hooks, config=config) as sess:
    sess.run(train_op)
""",
        # TF 1 session config
        """import tensorflow as tf
import horovod.keras as hvd
hvd.init()
config = tf.ConfigProto()
config.gpu_options.visible_device_list = str(hvd.local_rank())
keras.backend.set_session(tf.Session(config=config))
model.fit(x, y)
""",
        # pinned by the launcher's environment
        """import os
import horovod.tensorflow as hvd
os.environ["CUDA_VISIBLE_DEVICES"] = os.environ["OMPI_COMM_WORLD_LOCAL_RANK"]
hvd.init()
model.fit(x, y)
""",
        # a test of Horovod itself, not a training program
        """import unittest
import horovod.tensorflow as hvd
class ProcessSetTests(unittest.TestCase):
    def test_sizes(self):
        hvd.init()
        model.fit(ds)
""",
        # a scheduler's task (one per container) that is told its Horovod rank by the scheduler
        """import os
import horovod.tensorflow as hvd
os.environ["HOROVOD_RANK"] = rank
os.environ["HOROVOD_LOCAL_RANK"] = local_rank
hvd.init()
model.fit(x, y)
""",
        # a task given its own TF_CONFIG by the scheduler that started it in its container
        """import json, os
import horovod.tensorflow as hvd
task = json.loads(os.environ["TF_CONFIG"])["task"]
hvd.init()
model.fit(x, y)
""",
        # not Horovod's TensorFlow binding
        """import horovod.torch as hvd
import tensorflow as tf
hvd.init()
""",
        # an Estimator whose RunConfig carries a session config pinned per rank
        """import horovod.tensorflow as hvd
import tensorflow as tf
hvd.init()
config = tf.compat.v1.ConfigProto()
config.gpu_options.visible_device_list = str(hvd.local_rank())
estimator = tf.estimator.Estimator(model_fn=model_fn, config=tf.estimator.RunConfig(session_config=config))
estimator.train(input_fn=train_fn, hooks=[hvd.BroadcastGlobalVariablesHook(0)])
""",
        # Intel's CPU Horovod material: it checks for the oneDNN build and names no GPU
        """import horovod.tensorflow.keras as hvd
import tensorflow as tf
from tensorflow.python import _pywrap_util_port
hvd.init()
print("oneDNN", _pywrap_util_port.IsMklEnabled())
model.compile("sgd", "mse")
model.fit(x, y, epochs=12)
""",
    )

    def check(self, facts: ModuleFacts, context: Context) -> Iterator[Violation]:
        inits = horovod_init(facts)
        if (not inits or not trains(facts) or _chooses_devices(facts) or _placed_by_scheduler(facts)
                or _pinning_commented_out(facts) or _requests_no_gpu(facts) or _tuned_for_cpus(facts)
                or _pinned_elsewhere(facts)):
            return
        for call in inits:
            yield self.report(call)


_COMMENTED_PIN = re.compile(r"^\s*#.*(visible_device|set_visible_devices|CUDA_VISIBLE_DEVICES).*local_rank\(\)")


def _pinning_commented_out(facts: ModuleFacts) -> bool:
    """A pinning line the author commented out (`# config.gpu_options.visible_device_list =
    str(hvd.local_rank())`): the job runs without GPUs on purpose (Intel's CPU Horovod trainer)."""
    return any(_COMMENTED_PIN.search(line) for line in facts.source_lines)


_SESSION_PIN = re.compile(r"^[^#\n]*visible_device_list[^\n]*local_rank")
_IMPORTER_DEPTH = 3  # a harness that imports a package whose `__init__` imports the model modules


def _pinned_elsewhere(facts: ModuleFacts) -> bool:
    """Whether a project module that imports this one (directly, or through up to two more) pins a GPU per rank
    on a TF 1 session's config (`config.gpu_options.visible_device_list = str(hvd.local_rank())`): the session
    that runs this module's graph is made there (a profiling harness that builds each model's graph in a module
    of its own). A TF 2 pin (`set_visible_devices`) acts where it is called, so it counts only through a call
    (above); a sibling script that pins its own process says nothing of this one."""
    if facts.loader is None:
        return False
    seen, level = {id(facts)}, [facts]
    for _ in range(_IMPORTER_DEPTH):
        level = [m for model in level for m in facts.loader.consumers(model) if id(m) not in seen]
        seen.update(id(m) for m in level)
        if any(_SESSION_PIN.search(line) for model in level for line in model.source_lines):
            return True
    return False


# TensorFlow's CPU thread pools, OpenMP's for Intel's oneDNN (`OMP_NUM_THREADS`, `KMP_AFFINITY`), or a check that
# the build uses it (`IsMklEnabled()`)
_CPU_POOLS = re.compile(r"\b(?:intra|inter)_op_parallelism_threads\b|\bOMP_NUM_THREADS\b|\bKMP_AFFINITY\b|"
                        r"\bIsMklEnabled\b")
_GPU_WORD = re.compile(r"gpu|cuda", re.IGNORECASE)


def _tuned_for_cpus(facts: ModuleFacts) -> bool:
    """A module that sizes TensorFlow's or OpenMP's CPU thread pools (`intra_op_parallelism_threads`,
    `OMP_NUM_THREADS`), or checks for Intel's oneDNN build (`IsMklEnabled()`), and names no GPU or CUDA anywhere
    (Intel's CPU Horovod trainers): its processes have no GPU to share."""
    text = "\n".join(facts.source_lines)
    return bool(_CPU_POOLS.search(text)) and not _GPU_WORD.search(text)


def _requests_no_gpu(facts: ModuleFacts) -> bool:
    """A task whose resource requests (flytekit's `Resources(cpu="1", mem="1000Mi")`) name no GPU: its pods
    have none to share."""
    requests = [c for c in facts.calls if facts.resolve(c.func) == "flytekit.Resources"]
    return bool(requests) and not any(a.keyword is not None and a.keyword.value == "gpu"
                                      for c in requests for a in c.node.args)


def _placed_by_scheduler(facts: ModuleFacts) -> bool:
    """Whether a scheduler, not `horovodrun`, places this process: the module sets Horovod's rank and local
    rank itself, or is a task given its own `TF_CONFIG` (tf-yarn: one process per container, with the GPUs the
    container holds). How many processes share a host's GPUs is then not in the code."""
    return bool(horovod_place_sets(facts)) or _mentions(facts, _SCHEDULED_STRING)


def _chooses_devices(facts: ModuleFacts, follow: bool = True) -> bool:
    """Whether the module picks a device per process (or may, through a helper it calls, or through a
    project module whose function it calls and that picks devices somewhere)."""
    for call in facts.calls:
        last = (call.attr or (call.func or "").split(".")[-1])
        if _PINNING_CALL.search(last) or any(a.keyword and "visible_device" in a.keyword.value for a in call.node.args):
            return True
        if call.func and facts.resolve(call.func) is None and _HELPER_CALL.search(last):
            return True
        helper = facts.foreign(call.func) if follow and call.func else None
        if helper is not None and isinstance(helper[0], ModuleFacts) and _chooses_devices(helper[0], follow=False):
            return True
    for assign in facts.assigns:  # `config.gpu_options.visible_device_list = ...`, if the config is used
        for target in assign.targets:
            config = target.split(".")[0]
            if "visible_device" in target and any(reads(n, config) for c in facts.calls for n in c.arg_names):
                return True
    return _mentions(facts, _PINNED_STRING)


def _mentions(facts: ModuleFacts, text: str) -> bool:
    """Whether a short string literal of the module holds `text` (an environment variable's name); True when
    the module cannot be tokenized (cannot tell)."""
    try:
        return any(token.type == tokenize.STRING and text in token.string and len(token.string) < 40
                   for token in tokenize.generate_tokens(io.StringIO("\n".join(facts.source_lines)).readline))
    except (tokenize.TokenError, SyntaxError):
        return True
