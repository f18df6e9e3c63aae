from __future__ import annotations

from typing import Iterator

import libcst as cst

from tfdoctor.lint.dataflow import definitions, mentions_replica_count
from tfdoctor.lint.facts import CallFact, DatasetChain, ModuleFacts, reads
from tfdoctor.lint.findings import Severity, Violation
from tfdoctor.lint.names import call_arg, dotted, literal_int
from tfdoctor.lint.rule import Context, Rule


class UnscaledGlobalBatch(Rule):
    """
    ## What it does
    Finds `Dataset.batch(B)` in a pipeline that feeds a strategy (through
    `strategy.experimental_distribute_dataset`, or `model.fit` on a model built in `strategy.scope()`)
    where `B` is not derived from `strategy.num_replicas_in_sync` (or `get_per_replica_batch_size`). It
    stays silent when the code derives a per-replica size from `B`, which shows a deliberate fixed global
    batch.

    ## Why it is bad
    The batch you give the strategy is the *global* batch: each of N replicas gets B/N examples. A batch
    size tuned for one GPU leaves every device mostly idle, and the per-step all-reduce of the gradients,
    which does not shrink with the batch, dominates the step.

    ## Example
    ```python
    import tensorflow as tf
    strategy = tf.distribute.MirroredStrategy()
    BATCH_SIZE = 32
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH_SIZE)  # TFD106
    dist_ds = strategy.experimental_distribute_dataset(ds)
    ```

    ## Use instead
    ```python
    import tensorflow as tf
    strategy = tf.distribute.MirroredStrategy()
    BATCH_PER_REPLICA = 32
    GLOBAL_BATCH = BATCH_PER_REPLICA * strategy.num_replicas_in_sync
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH)
    dist_ds = strategy.experimental_distribute_dataset(ds)
    ```
    """

    code = "TFD106"
    name = "unscaled-global-batch"
    severity = Severity.WARNING
    summary = "`batch(B)` feeds a strategy but B does not scale with `num_replicas_in_sync`."
    MESSAGES = {"default": "`batch({size})` feeds a strategy but does not scale with `num_replicas_in_sync`"}
    triggers = ("batch",)
    INVALID = (
        # Keras fit on a model compiled in the scope, literal batch size, chain across assignments
        """import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
ds = tf.data.Dataset.from_tensor_slices((x, y))
ds = ds.shuffle(1000)
ds = ds.batch(64)  # TFD106
with strategy.scope():
    model = make_model()
    model.compile(optimizer="adam", loss="mse")
model.fit(ds, epochs=3)
""",
        # the pipeline is built by a function and distributed later
        """from tensorflow import data, distribute
strategy = distribute.MirroredStrategy()
BATCH = 16
def make_dataset(files):
    ds = data.TFRecordDataset(files).map(parse, num_parallel_calls=data.AUTOTUNE)
    return ds.batch(BATCH).prefetch(data.AUTOTUNE)  # TFD106
dist = strategy.experimental_distribute_dataset(make_dataset(FILES))
""",
        # fit called inside the scope with the batch size from a config attribute
        """import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
batch_size = cfg.batch_size
train = tf.data.Dataset.from_tensor_slices(arrays).batch(batch_size)  # TFD106
with strategy.scope():
    model = build()
    model.compile(loss="mse")
    model.fit(train, epochs=1)
""",
    )
    VALID = (
        # per-replica size from the input context
        """import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
def dataset_fn(ctx):
    bs = ctx.get_per_replica_batch_size(GLOBAL)
    return tf.data.Dataset.from_tensor_slices(data).batch(bs)
dist = strategy.distribute_datasets_from_function(dataset_fn)
""",
        # a deliberate fixed global batch: the per-replica size is derived from it
        """import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
GLOBAL_BATCH = 256
PER_REPLICA = GLOBAL_BATCH // strategy.num_replicas_in_sync
ds = tf.data.Dataset.from_tensor_slices(data).batch(GLOBAL_BATCH)
dist = strategy.experimental_distribute_dataset(ds)
""",
        # a pipeline that never reaches a strategy
        """import tensorflow as tf
ds = tf.data.Dataset.from_tensor_slices(data).batch(32)
model.fit(ds)
""",
    )

    def check(self, facts: ModuleFacts, context: Context) -> Iterator[Violation]:
        seen: set[int] = set()
        for call, expr in self._strategy_feeds(facts):
            chain = facts.dataset_chain(expr, call.scope, call.order)
            if chain is None:
                continue
            batch = chain.last("batch") or chain.last("padded_batch")
            if batch is None or id(batch.call) in seen:
                continue
            seen.add(id(batch.call))
            size = call_arg(batch.call, 0, "batch_size")
            if self._unscaled(facts, size, chain):
                text = dotted(size) or str(literal_int(size))
                yield self.report(batch.call.func.attr, statement=facts.call_fact(batch.call).statement, size=text)

    @staticmethod
    def _strategy_feeds(facts: ModuleFacts) -> Iterator[tuple[CallFact, cst.BaseExpression]]:
        """(call, dataset expression) for every place a dataset enters a strategy."""
        scoped_models = {
            t for a in facts.assigns if facts.in_strategy_scope(a.scope, a.withs) for t in a.targets
        }
        for call in facts.calls:
            if call.attr == "experimental_distribute_dataset" and facts.is_strategy(call.receiver):
                expr = call_arg(call.node, 0, "dataset")
            elif call.attr == "fit" and (
                dotted(call.receiver) in scoped_models or facts.in_strategy_scope(call.scope, call.withs)
            ):
                expr = call_arg(call.node, 0, "x")
            else:
                continue
            if expr is not None:
                yield call, expr

    @staticmethod
    def _unscaled(facts: ModuleFacts, size: cst.BaseExpression | None, chain: DatasetChain) -> bool:
        if literal_int(size) is not None:
            return True
        name = dotted(size)
        if name is None:
            return False  # an expression: cannot decide
        if mentions_replica_count(facts, frozenset({name}), chain.scope):
            return False
        if not definitions(facts, name, chain.scope) and "." not in name:
            return False  # a parameter or an unknown global
        # A per-replica size derived from it shows the global batch is deliberate.
        return not any(
            reads(a.names, name) and mentions_replica_count(facts, a.names, a.scope) for a in facts.assigns
        )

