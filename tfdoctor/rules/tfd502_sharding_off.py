from __future__ import annotations

import re
from typing import Iterator

import libcst as cst

from tfdoctor.lint.dataflow import calls_any, definitions, guard_test, multi_worker_mirrored, training_inputs
from tfdoctor.lint.facts import AssignFact, CallFact, DatasetChain, ModuleFacts
from tfdoctor.lint.findings import Severity, Violation
from tfdoctor.lint.names import call_arg, dotted
from tfdoctor.lint.rule import Context, Rule



class ShardingOff(Rule):
    """
    ## What it does
    In a module that creates a `MultiWorkerMirroredStrategy` (or TF 1's `CollectiveAllReduceStrategy`), finds
    `auto_shard_policy = AutoShardPolicy.OFF` (or TF 2.0's `experimental_distribute.auto_shard = False`) when
    the module never shards by hand (no `shard(...)` call and no use of the input context's
    `input_pipeline_id`) and the options reach a training pipeline (`with_options(options)` on a dataset given
    to `fit` or distributed). On one host (`MirroredStrategy`) turning sharding off is harmless and not
    flagged.

    ## Why it is bad
    With sharding off, every worker iterates over the whole dataset. In the same order, the global batch
    holds the same examples N times: N workers do the work of one, and the gradients of each step come from
    1/N of the data you meant. When each worker shuffles in its own order (a `shuffle` with no seed and no
    global seed, or a seed from the worker's task), the batches differ, but every worker still reads every
    example: one epoch is N passes over the data, and the message says so.

    ## Example
    ```python
    import tensorflow as tf
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF  # TFD502
    ds = tf.data.TFRecordDataset(files).map(parse).batch(64).with_options(options)
    model.fit(ds, epochs=3)
    ```

    ## Use instead
    ```python
    import tensorflow as tf
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    def dataset_fn(context):
        ds = tf.data.TFRecordDataset(files).shard(context.num_input_pipelines, context.input_pipeline_id)
        return ds.map(parse).batch(context.get_per_replica_batch_size(64))
    dist = strategy.distribute_datasets_from_function(dataset_fn)
    ```
    """

    code = "TFD502"
    name = "sharding-off"
    severity = Severity.ERROR
    summary = "Multi-worker: `AutoShardPolicy.OFF` with no manual `shard(...)` (every worker trains on the same data)."
    MESSAGES = {
        "default": "sharding is turned off and nothing calls `shard(...)`, so every worker trains on the same examples",
        "shuffled": "sharding is turned off and nothing calls `shard(...)`, so every worker reads every example, in "
                    "its own shuffled order",
    }
    triggers = ("AutoShardPolicy", "auto_shard")
    INVALID = (
        """import tensorflow as tf
from tensorflow.data.experimental import AutoShardPolicy
strategy = tf.distribute.experimental.MultiWorkerMirroredStrategy()
opts = tf.data.Options()
opts.experimental_distribute.auto_shard_policy = AutoShardPolicy.OFF  # TFD502
ds = tf.data.TFRecordDataset("train.tfrecord").batch(64).with_options(opts)
model.fit(ds)
""",
        """import tensorflow as tf
strategy = tf.distribute.experimental.MultiWorkerMirroredStrategy()
options = tf.data.Options()
options.experimental_distribute.auto_shard = False  # TFD502
dataset = make_dataset()
dataset = tf.data.TFRecordDataset(files).with_options(options)
dist = strategy.experimental_distribute_dataset(dataset)
""",
        # each worker shuffles in its own order, but still reads every example
        """import tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy()
options = tf.data.Options()
options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF  # TFD502
ds = tf.data.TFRecordDataset(files).shuffle(10000).batch(64).with_options(options)
model.fit(ds)
""",
        # each worker's generator draws its own random order
        """import numpy as np
import tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy()
def samples():
    for index in np.random.permutation(len(dataset)):
        yield dataset[int(index)]
options = tf.data.Options()
options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF  # TFD502
ds = tf.data.Dataset.from_generator(samples, output_signature=signature).with_options(options).batch(64)
model.fit(ds)
""",
    )
    VALID = (
        # sharded by hand
        """import tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy()
options = tf.data.Options()
options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
ds = tf.data.TFRecordDataset(files).shard(num_workers, worker_index).with_options(options)
""",
        # the options never reach the training pipeline, which is replaced before `fit`
        """import tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy()
options = tf.data.Options()
options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
train = tf.data.TFRecordDataset(files).batch(64).with_options(options)
train = tf.data.TFRecordDataset(files).batch(128)
model.fit(train)
""",
        # a later policy replaces OFF before the options are used
        """import tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy()
options = tf.data.Options()
options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
model.fit(tf.data.TFRecordDataset(files).batch(64).with_options(options))
""",
        # one host
        """import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
options = tf.data.Options()
options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
""",
    )

    def check(self, facts: ModuleFacts, context: Context) -> Iterator[Violation]:
        if (not multi_worker_mirrored(facts) or calls_any(facts, "shard")
                or any("input_pipeline_id" in line for line in facts.source_lines)):
            return
        reported: set[int] = set()
        for call in _training_with_options(facts):
            off = _policy_off(facts, call)
            if off is not None and id(off) not in reported:
                reported.add(id(off))
                template = "shuffled" if _shuffled_per_worker(facts, call) else "default"
                yield self.report(off.value, template, statement=off.statement)


def _training_with_options(facts: ModuleFacts) -> list[CallFact]:
    """`with_options(...)` calls whose dataset reaches training: in the method chain given to `fit` or a
    distribute call, or in the latest value of the variable given to it (whatever the pipeline's source)."""
    found = []
    for use in training_inputs(facts):
        node: cst.BaseExpression | None = use.expr
        name = dotted(node)
        if name is not None:
            assigned = definitions(facts, name, use.scope, use.order)
            node = assigned[-1].value if assigned and assigned[-1].operator == "=" else None
        while isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
            if node.func.attr.value == "with_options" and (call := facts.call_fact(node)) is not None:
                found.append(call)
            node = node.func.value
    return found


def _shuffled_per_worker(facts: ModuleFacts, with_options: CallFact) -> bool:
    """Whether each worker shuffles the pipeline in its own order: a `shuffle` with no seed while the program
    sets no global seed (`tf.random.set_seed`), or with a seed computed from the worker's identity."""
    chain = facts.dataset_chain(with_options.node, with_options.scope, with_options.order, any_source=True)
    if chain is not None and chain.source.endswith(".from_generator") and _draws_its_own_order(facts, chain):
        return True
    shuffles = [op for op in chain.ops if op.method == "shuffle"] if chain is not None else []
    if not shuffles:
        return False
    seeded = calls_any(facts, "set_seed", "set_random_seed")
    for op in shuffles:
        seed = call_arg(op.call, 1, "seed")
        if seed is None or (isinstance(seed, cst.Name) and seed.value == "None"):
            if not seeded:
                return True
        elif guard_test(facts, seed, with_options.scope):
            return True
    return False


_RANDOM_ORDER = re.compile(r"^(numpy\.random\.(permutation|shuffle|choice)|random\.(shuffle|sample|choice))$")


def _draws_its_own_order(facts: ModuleFacts, chain: DatasetChain) -> bool:
    """A `from_generator` source whose generator draws a random order (`np.random.permutation(n)`) while the
    program seeds no random generator: each worker's process draws its own."""
    generator = call_arg(chain.source_call, 0, "generator")
    scope = chain.source_scope or chain.scope
    functions = facts.callables_of(generator, scope) if generator is not None else []
    return bool(functions) and not calls_any(facts, "seed") and any(
        _RANDOM_ORDER.match(function.owner.resolve(call.func) or "")  # type: ignore[union-attr]
        for function in functions for call in function.calls if call.func)


def _policy_off(facts: ModuleFacts, with_options: CallFact) -> AssignFact | None:
    """The assignment that turned sharding off in the options given to this `with_options`, when it is the
    latest word on them before the call (a later `Options()` or policy replaces it)."""
    options = dotted(call_arg(with_options.node, 0, "options"))
    if options is None:
        return None
    latest: list[AssignFact] = []
    for target in (f"{options}.experimental_distribute.auto_shard_policy", f"{options}.experimental_distribute.auto_shard",
                   options):
        latest.extend(definitions(facts, target, with_options.scope, with_options.order)[-1:])
    if not latest:
        return None
    last = max(latest, key=lambda a: a.order)
    value = dotted(last.value) or ""
    if value.endswith("AutoShardPolicy.OFF") or (last.targets[0].endswith(".auto_shard") and value == "False"):
        return last
    return None
