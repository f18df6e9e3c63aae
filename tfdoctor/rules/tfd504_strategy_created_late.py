from __future__ import annotations

import re
from typing import Iterator

from tfdoctor.lint.facts import CallFact, ModuleFacts
from tfdoctor.lint.findings import Severity, Violation
from tfdoctor.lint.dataflow import calls_any, multi_worker_mirrored
from tfdoctor.lint.rule import Context, Rule

# Calls that certainly initialise the eager context (listing physical devices or setting memory growth do not, nor
# does `device_lib.list_local_devices()`: TF 2.21 leaves the context uninitialised and a MultiWorkerMirroredStrategy
# made after it works).
_STARTS_RUNTIME = re.compile(
    r"^tensorflow\.(constant|Variable|zeros|ones|fill|eye|range|convert_to_tensor|random\.(?!set_seed)\w+|"
    r"config\.list_logical_devices|config\.experimental\.list_logical_devices|config\.experimental_list_devices|"
    r"test\.is_gpu_available|test\.gpu_device_name|data\.Dataset\.\w+|data\.TFRecordDataset)$"
    r"|^keras\.(Sequential|Model|models\.Sequential|models\.Model|applications\.\w+)$"
    r"|^tensorflow_datasets\.load$"  # it returns `tf.data` datasets
)
# `TF_CONFIG` removed from the environment, and set in it: the last of them before a strategy says whether it
# has a cluster.
_CLEARED = re.compile(r"""\bdel\s+os\.environ\[\s*['"]TF_CONFIG['"]\s*\]|\benviron\.pop\(\s*['"]TF_CONFIG['"]""")
_SET = re.compile(r"""\benviron\[\s*['"]TF_CONFIG['"]\s*\]\s*=(?!=)|\benviron\.(?:setdefault|update)\(|\bputenv\(""")


class StrategyCreatedLate(Rule):
    """
    ## What it does
    Finds a `MultiWorkerMirroredStrategy(...)` created after code in the same function (or, for a strategy
    created in a function called from the module, in the module before that call) that starts the TensorFlow
    runtime: creating a tensor, variable, dataset (`tfds.load` too) or Keras model, or listing logical devices
    (`tf.config.list_logical_devices`, `tf.test.is_gpu_available`; `device_lib.list_local_devices` does not
    start it). Only
    calls that run unconditionally before the strategy count; configuring physical devices does not. TF 1's
    `CollectiveAllReduceStrategy`, programs that disable eager execution and code for TF 1 (a pin, or the
    code's own `tf.Session`, `tf.app.flags`) run in graph mode and are not checked. Nor is a strategy made
    just after the code removed `TF_CONFIG` (`del os.environ["TF_CONFIG"]`, the last change to it above the
    strategy): it has one local worker, whose late start only logs a warning.

    ## Why it is bad
    The strategy sets up the collective operations between workers when it is created, and TensorFlow allows
    that only before its runtime starts. Created later, it fails with "Collective ops must be configured at
    program startup" (or, on older versions, trains without the other workers).

    ## Example
    ```python
    import tensorflow as tf
    print(tf.config.list_logical_devices("GPU"))
    strategy = tf.distribute.MultiWorkerMirroredStrategy()  # TFD504
    ```

    ## Use instead
    ```python
    import tensorflow as tf
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    print(tf.config.list_logical_devices("GPU"))
    ```
    """

    code = "TFD504"
    name = "strategy-created-late"
    severity = Severity.ERROR
    summary = "`MultiWorkerMirroredStrategy` is created after TensorFlow work started the runtime."
    MESSAGES = {"default": "`MultiWorkerMirroredStrategy` is created after `{first}` started the TensorFlow runtime; "
                           "create it first"}
    triggers = ("MultiWorkerMirroredStrategy", "CollectiveAllReduceStrategy")
    INVALID = (
        """import tensorflow as tf
def main():
    x = tf.constant([1.0, 2.0])
    strategy = tf.distribute.experimental.MultiWorkerMirroredStrategy()  # TFD504
""",
        """import tensorflow as tf
print(tf.config.list_logical_devices("GPU"))
def make_strategy():
    return tf.distribute.MultiWorkerMirroredStrategy()  # TFD504
strategy = make_strategy()
""",
        # tfds.load returns tf.data datasets: the runtime has started
        """import tensorflow as tf
import tensorflow_datasets as tfds
def main():
    datasets = tfds.load("mnist", as_supervised=True)
    strategy = tf.distribute.MultiWorkerMirroredStrategy()  # TFD504
""",
    )
    VALID = (
        # TF 1 code: graph mode, no eager runtime to start
        """# tfdoctor: target-tensorflow=1.15
import tensorflow as tf
import tensorflow_datasets as tfds
FLAGS = tf.app.flags.FLAGS
dataset = tfds.load("mnist", split="train")
strategy = tf.distribute.experimental.MultiWorkerMirroredStrategy()
""",
        # the cluster removed first: one local worker
        """import os
import tensorflow as tf
dataset = tf.data.Dataset.from_tensor_slices((features, labels)).batch(64)
del os.environ["TF_CONFIG"]
strategy = tf.distribute.MultiWorkerMirroredStrategy()
""",
        # physical devices configured first: allowed
        """import tensorflow as tf
gpus = tf.config.list_physical_devices("GPU")
for gpu in gpus:
    tf.config.experimental.set_memory_growth(gpu, True)
strategy = tf.distribute.MultiWorkerMirroredStrategy()
x = tf.constant(1.0)
""",
        # graph mode (TF 1 style)
        """import tensorflow as tf
tf.compat.v1.disable_eager_execution()
model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
strategy = tf.distribute.experimental.MultiWorkerMirroredStrategy()
""",
        # the tensor is made only on another branch
        """import tensorflow as tf
if args.debug:
    tf.print(tf.constant(0))
strategy = tf.distribute.MultiWorkerMirroredStrategy()
""",
    )

    def check(self, facts: ModuleFacts, context: Context) -> Iterator[Violation]:
        if calls_any(facts, "disable_eager_execution", "disable_v2_behavior") or context.targets.tensorflow.below(2):
            return  # graph mode (turned on, or TF 1's default): no eager runtime to start early
        for strategy in multi_worker_mirrored(facts):
            if (facts.resolve(strategy.func) or "").endswith("CollectiveAllReduceStrategy"):
                continue  # TF 1's strategy, used in graph mode (Estimator)
            if _cluster_removed(facts, strategy):
                continue  # no `TF_CONFIG`: a strategy of one local worker, which starts late without harm
            first = self._earlier_start(facts, strategy, depth=0)
            if first is not None:
                yield self.report(strategy, first=first.func)

    def _earlier_start(self, facts: ModuleFacts, at: CallFact, depth: int) -> CallFact | None:
        """The first unconditional runtime-starting call before `at` in its scope, or before the calls of
        its function (two levels up)."""
        for call in at.scope.calls:
            if call.order >= at.order:
                break
            if (call.scope is at.scope and not set(call.ifs) - set(at.ifs) and not set(call.loops) - set(at.loops)
                    and _STARTS_RUNTIME.match(facts.resolve(call.func) or "")):
                return call
        if at.scope.is_function and depth < 2:
            for caller in facts.callers_of(at.scope):
                found = self._earlier_start(facts, caller, depth + 1)
                if found is not None:
                    return found
        return None


def _cluster_removed(facts: ModuleFacts, strategy: CallFact) -> bool:
    """Whether the last change to `TF_CONFIG` above the strategy (in the module's order, a notebook's cells
    joined) removes it (`del os.environ["TF_CONFIG"]`): the strategy then has no cluster, one local worker."""
    line = facts.position(strategy.node)[0]
    last = None
    for text in facts.source_lines[:line - 1]:
        if _CLEARED.search(text):
            last = "cleared"
        elif _SET.search(text):
            last = "set"
    return last == "cleared"
