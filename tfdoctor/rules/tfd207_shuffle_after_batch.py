from __future__ import annotations

from typing import Iterator

from tfdoctor.lint.facts import ModuleFacts
from tfdoctor.lint.findings import Severity, Violation
from tfdoctor.lint.rule import Context, Rule


class ShuffleAfterBatch(Rule):
    """
    ## What it does
    Finds `.batch(...)` followed by `.shuffle(...)` in a `tf.data` pipeline (with no `unbatch` between).

    ## Why it is bad
    Shuffling after batching shuffles whole batches: the same examples always train together, and the
    shuffle buffer counts batches, not examples.

    ## Example
    ```python
    import tensorflow as tf
    ds = tf.data.Dataset.from_tensor_slices(data).batch(64).shuffle(100)  # TFD207
    ```

    ## Use instead
    ```python
    import tensorflow as tf
    ds = tf.data.Dataset.from_tensor_slices(data).shuffle(10_000).batch(64)
    ```
    """

    code = "TFD207"
    name = "shuffle-after-batch"
    severity = Severity.INFO
    summary = "`.batch(...).shuffle(...)` shuffles batches, not examples."
    OUTRANKS = ("TFD203",)  # on a `shuffle()` a pipeline ends with: the order first
    MESSAGES = {"default": "`shuffle` after `batch` shuffles whole batches; shuffle before batching"}
    triggers = ("shuffle",)
    INVALID = (
        """from tensorflow import data
ds = data.Dataset.range(1000)
ds = ds.batch(10)
ds = ds.shuffle(50)  # TFD207
""",
        """import tensorflow as tf
def make():
    return tf.data.TFRecordDataset(files).map(parse).padded_batch(8).shuffle(4)  # TFD207
""",
    )
    VALID = (
        """import tensorflow as tf
ds = tf.data.Dataset.range(1000).shuffle(1000).batch(10)
""",
        """import tensorflow as tf
ds = tf.data.Dataset.range(1000).batch(10).unbatch().shuffle(1000).batch(10)
""",
    )

    def check(self, facts: ModuleFacts, context: Context) -> Iterator[Violation]:
        for call in facts.method_calls("shuffle"):
            chain = facts.dataset_chain(call.node, call.scope, call.order + 1)
            if chain is None:
                continue
            batched = False
            for op in chain.ops:
                if op.method in ("batch", "padded_batch", "ragged_batch"):
                    batched = True
                elif op.method == "unbatch":
                    batched = False
                elif op.method == "shuffle" and op.call is call.node and batched:
                    yield self.report(call.node.func.attr, statement=call.statement)
