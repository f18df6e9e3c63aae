from __future__ import annotations

from typing import Iterator

from tfdoctor.lint.dataflow import launches_processes, line_text, multi_worker_mirrored, tf_config_sets
from tfdoctor.lint.facts import AssignFact, CallFact, ModuleFacts
from tfdoctor.lint.findings import Severity, Violation
from tfdoctor.lint.names import call_arg
from tfdoctor.lint.rule import Context, Rule

_TRAINING = frozenset({"fit", "fit_generator", "train_on_batch", "apply_gradients", "minimize"})
_STRATEGY_USES = frozenset({"scope", "run", "experimental_run_v2", "experimental_distribute_dataset",
                            "distribute_datasets_from_function", "reduce"})


class StrategyBeforeTfConfig(Rule):
    """
    ## What it does
    Finds a `MultiWorkerMirroredStrategy(...)` (or `CollectiveAllReduceStrategy`) that surely runs before the
    same program gives `TF_CONFIG` a value (`os.environ["TF_CONFIG"] = ...`, `os.environ.update(...)`,
    `os.environ.setdefault(...)`, `os.putenv(...)`), when the strategy or a `fit` is still used after that write.
    Order is followed through the functions this module calls (three levels up): a strategy made in `main()` and
    a write at the top of the module before `main()` runs is fine. It is silent when the order cannot be decided
    (a function nothing in this module calls, or the two in different branches), when the strategy is given its
    own `cluster_resolver`, when the program writes `TF_CONFIG` again after that write or starts other processes
    (`subprocess`, `multiprocessing`: the value is for them, as in the tutorial notebook that launches `main.py`
    for each worker), when another strategy is created after the write (it reads the value: files of several
    programs pasted one after another), and for removals (`pop`, `del`), which change nothing for a strategy that
    already read the variable.

    The finding is at the strategy: that call reads `TF_CONFIG` and fixes the cluster for the whole run, so
    it is the one to move, and one strategy written before several assignments is one mistake.

    ## Why it is bad
    The strategy reads `TF_CONFIG` once, when it is created. Set later, the variable changes nothing: each
    process trains alone as a single worker (or in the cluster the launcher gave it, not the one the code
    describes), with no error, and every worker trains on its own.

    ## Example
    ```python
    import json
    import os
    import tensorflow as tf
    strategy = tf.distribute.MultiWorkerMirroredStrategy()  # TFD512
    os.environ["TF_CONFIG"] = json.dumps({"cluster": {"worker": hosts}, "task": {"type": "worker", "index": index}})
    with strategy.scope():
        model = build_and_compile_model()
    model.fit(ds, epochs=3)
    ```

    ## Use instead
    ```python
    import json
    import os
    import tensorflow as tf
    os.environ["TF_CONFIG"] = json.dumps({"cluster": {"worker": hosts}, "task": {"type": "worker", "index": index}})
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        model = build_and_compile_model()
    model.fit(ds, epochs=3)
    ```
    """

    code = "TFD512"
    name = "strategy-before-tf-config"
    severity = Severity.ERROR
    summary = "Multi-worker: the strategy is created before the program sets `TF_CONFIG` (each worker trains alone)."
    MESSAGES = {"default": "`{strategy}` is created before {line} sets `TF_CONFIG`, so it never joins that cluster"}
    triggers = ("TF_CONFIG",)
    INVALID = (
        """import json
import os
import tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy()  # TFD512
os.environ["TF_CONFIG"] = json.dumps(config)
with strategy.scope():
    model = build_model()
model.fit(ds)
""",
        # the strategy is made when the module is imported, the variable in `main`
        """import json
import os
import tensorflow as tf
strategy = tf.distribute.experimental.MultiWorkerMirroredStrategy()  # TFD512
def main(args):
    os.environ.update({"TF_CONFIG": json.dumps(make_config(args))})
    with strategy.scope():
        model = build_model()
    model.fit(ds)
main(parse_args())
""",
        # the calls that lead to them are in the wrong order
        """import os
import tensorflow as tf
def make_strategy():
    return tf.distribute.MultiWorkerMirroredStrategy()  # TFD512
def set_cluster(index):
    os.environ["TF_CONFIG"] = cluster_json(index)
def main():
    strategy = make_strategy()
    set_cluster(0)
    with strategy.scope():
        model = build_model()
main()
""",
    )
    VALID = (
        # the variable first
        """import os
import tensorflow as tf
os.environ["TF_CONFIG"] = config_json
strategy = tf.distribute.MultiWorkerMirroredStrategy()
model.fit(ds)
""",
        # the order of the two functions is decided elsewhere
        """import os
import tensorflow as tf
def make_strategy():
    return tf.distribute.MultiWorkerMirroredStrategy()
def set_cluster(index):
    os.environ["TF_CONFIG"] = cluster_json(index)
""",
        # a notebook that sets the variable for the worker processes it launches, one value each
        """import json
import os
import tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    model = build_model()
os.environ["TF_CONFIG"] = json.dumps(tf_config)
tf_config["task"]["index"] = 1
os.environ["TF_CONFIG"] = json.dumps(tf_config)
model.fit(ds)
""",
        # removed after the strategy read it: nothing changes for the strategy
        """import os
import tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy()
os.environ.pop("TF_CONFIG", None)
model.fit(ds)
""",
        # one branch or the other
        """import os
import tensorflow as tf
if args.local:
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
else:
    os.environ["TF_CONFIG"] = config_json
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
model.fit(ds)
""",
        # two programs pasted into one file: the second strategy reads the value
        """import os
import tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy()
model.fit(ds)
import tensorflow as tf
os.environ["TF_CONFIG"] = config_json
strategy = tf.distribute.MultiWorkerMirroredStrategy()
model.fit(ds)
""",
        # its own cluster resolver
        """import os
import tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy(cluster_resolver=resolver)
os.environ["TF_CONFIG"] = config_json
model.fit(ds)
""",
    )

    def check(self, facts: ModuleFacts, context: Context) -> Iterator[Violation]:
        writes = tf_config_sets(facts)
        if not writes or launches_processes(facts):
            return
        strategies = multi_worker_mirrored(facts)
        for strategy in strategies:
            if call_arg(strategy.node, 1, "cluster_resolver") is not None:
                continue
            late = [w for w in writes if facts.runs_before(strategy, w) is True]
            if (not late or self._rewritten(facts, late) or not self._used_after(facts, strategy, late[0])
                    or any(facts.runs_before(late[0], other) is True for other in strategies)):
                continue  # a later strategy reads the value (snippets pasted one after another)
            name = (facts.resolve(strategy.func) or "MultiWorkerMirroredStrategy").split(".")[-1]
            yield self.report(strategy, strategy=name, line=line_text(facts, late[0].node))

    @staticmethod
    def _rewritten(facts: ModuleFacts, writes: list[CallFact | AssignFact]) -> bool:
        """Whether one write is followed by another: a value per launched worker, not this process's."""
        return any(facts.runs_before(a, b) is True for a in writes for b in writes if a is not b)

    @staticmethod
    def _used_after(facts: ModuleFacts, strategy: CallFact, write: CallFact | AssignFact) -> bool:
        """Whether the strategy, or training, is used after the write (else the value is for someone else)."""
        return any((c.attr in _TRAINING or (c.attr in _STRATEGY_USES and _is_this(facts, strategy, c)))
                   and facts.runs_before(write, c) is True for c in facts.calls)


def _is_this(facts: ModuleFacts, strategy: CallFact, call: CallFact) -> bool:
    """Whether a method is called on this strategy (or on a strategy the module cannot tell apart)."""
    return facts.is_strategy(call.receiver) or any(
        origin.expr is strategy.node for origin in facts.values_of(call.receiver, call.scope, call.order))
