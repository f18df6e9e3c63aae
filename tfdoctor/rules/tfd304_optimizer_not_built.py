from __future__ import annotations

from typing import Iterator

from tfdoctor.lint.dataflow import applied_optimizer, in_test_code, keras3_unknown
from tfdoctor.lint.facts import CallFact, ModuleFacts
from tfdoctor.lint.findings import Severity, Violation
from tfdoctor.lint.names import dotted
from tfdoctor.lint.rule import Context, Rule


class OptimizerNotBuilt(Rule):
    """
    ## What it does
    Keras 3 only (a Keras 3 that the project's pins, its code or `--target-keras` give; the installed or newest
    release is not enough, except in a profile's run, which meets the installed one): finds an optimizer whose
    `apply_gradients` runs in a distributed `tf.function` step (`strategy.run` inside a `tf.function`) with no
    `optimizer.build(model.trainable_variables)` anywhere in the module. Plain SGD (no momentum, no moving average) creates no variable on first use and is left
    alone, and so is test code (a `test*` function of a test module, a `TestCase` method).

    ## Why it is bad
    A Keras 3 optimizer creates its slot variables on first use. Inside a traced, distributed step that
    means creating variables in a replica context during tracing: errors such as "You must feed a value
    for placeholder tensor 'cond/...'", or a step that hangs. Building it first, in the strategy's scope,
    creates them as mirrored variables.

    ## Example
    ```python
    # tfdoctor: target-keras=3.0
    import tensorflow as tf
    with strategy.scope():
        model = build_model()
        optimizer = tf.keras.optimizers.Adam()

    def replica_step(x, y):
        with tf.GradientTape() as tape:
            loss = compute_loss(model(x), y)
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))  # TFD304

    @tf.function
    def step(x, y):
        strategy.run(replica_step, args=(x, y))
    ```

    ## Use instead
    ```python
    import tensorflow as tf
    with strategy.scope():
        model = build_model()
        optimizer = tf.keras.optimizers.Adam()
        optimizer.build(model.trainable_variables)

    def replica_step(x, y):
        with tf.GradientTape() as tape:
            loss = compute_loss(model(x), y)
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))

    @tf.function
    def step(x, y):
        strategy.run(replica_step, args=(x, y))
    ```
    """

    code = "TFD304"
    name = "optimizer-not-built"
    severity = Severity.ERROR
    summary = "Keras 3: an optimizer used in a distributed `tf.function` step was never `build()`-t."
    MESSAGES = {"default": ("`{optimizer}` is first built inside the distributed step `{replica}`; build it in "
                            "`strategy.scope()`"),
                "several": ("`{optimizer}` is first built inside one of the distributed steps {replicas}; build it "
                            "in `strategy.scope()`")}
    triggers = ("apply_gradients",)
    INVALID = (
        """# tfdoctor: target-keras=3.15
import tensorflow as tf
class Trainer:
    def __init__(self, strategy):
        self.strategy = strategy
        with strategy.scope():
            self.opt = tf.keras.optimizers.SGD(0.1, momentum=0.9)
    def replica(self, x):
        self.opt.apply_gradients(self.grads(x))  # TFD304
    @tf.function
    def step(self, x):
        self.strategy.run(self.replica, args=(x,))
""",
        # Keras 2 optimizers need no build; the same code is fine there
        """# tfdoctor: target-keras=3.0
import keras
import tensorflow as tf
opt = keras.optimizers.Adam()
step = tf.function(lambda x: strategy.run(lambda v: opt.apply_gradients(grads(v)), args=(x,)))  # TFD304
""",
        # two steps apply one optimizer (the regularised one every 4th iteration): one finding names both
        """# tfdoctor: target-keras=3.15
import tensorflow as tf
with strategy.scope():
    opt = tf.keras.optimizers.Adam()
def step_fn(x):
    opt.apply_gradients(grads(x))  # TFD304
def reg_step_fn(x):
    opt.apply_gradients(grads(x) + penalty(x))
@tf.function
def train_step(x):
    strategy.run(step_fn, args=(x,))
@tf.function
def reg_train_step(x):
    strategy.run(reg_step_fn, args=(x,))
""",
    )
    VALID = (
        # plain SGD: no momentum, so no variable to create on first use
        """import tensorflow as tf
with strategy.scope():
    optimizer = tf.keras.optimizers.SGD(learning_rate=0.1)
def replica(x):
    optimizer.apply_gradients(grads(x))
@tf.function
def step(x):
    strategy.run(replica, args=(x,))
""",
        # a unit test that runs one distributed step to check the model
        """import keras
import tensorflow as tf
class ModelTest(tf.test.TestCase):
    def test_one_step(self):
        strategy = tf.distribute.MirroredStrategy()
        optimizer = keras.optimizers.Adam()
        @tf.function
        def step(x):
            def replica(x):
                with tf.GradientTape() as tape:
                    loss = model(x)
                optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
            strategy.run(replica, args=(x,))
        step(x)
""",
        """# tfdoctor: target-keras=2.15
import tensorflow as tf
opt = tf.keras.optimizers.Adam()
def replica(x):
    opt.apply_gradients(grads(x))
@tf.function
def step(x):
    strategy.run(replica, args=(x,))
""",
        # an eager step creates the variables eagerly (slow: TFD107), not this error
        """import tensorflow as tf
opt = tf.keras.optimizers.Adam()
def replica(x):
    opt.apply_gradients(grads(x))
def step(x):
    strategy.run(replica, args=(x,))
""",
    )

    def check(self, facts: ModuleFacts, context: Context) -> Iterator[Violation]:
        if keras3_unknown(facts, context.targets.keras, context.run_code):
            return  # Keras 2 creates slots in the first apply_gradients, in the replica context
        built = {dotted(c.receiver) for c in facts.method_calls("build")}
        seen: set[int] = set()
        sites: dict[str, list[tuple[CallFact, str]]] = {}  # per optimizer, where each step applies it
        for run in facts.run_calls:
            if not facts.runs_in_graph(run.scope) or in_test_code(facts, run.scope):
                continue  # eager, or a unit test's one distributed call
            for replica in facts.transitive_callees(facts.callables_of(facts.replica_fn_expr(run), run.scope)):
                if replica.owner is not facts or replica.name == "train_step":
                    continue  # Keras' own `train_step` applies the compiled optimizer, which `fit` builds first
                applied = applied_optimizer(facts, replica)
                if applied is not None and applied.stateless:
                    continue  # plain SGD creates no variable on first use
                for call in replica.calls:
                    name = dotted(call.receiver)
                    if call.attr != "apply_gradients" or name is None or name in built or id(call) in seen:
                        continue
                    seen.add(id(call))
                    sites.setdefault(name, []).append((call, replica.name))
        for name, applied_in in sites.items():  # one finding per optimizer: which step builds it first may depend
            steps = list(dict.fromkeys(step for _, step in applied_in))  # on the loop (`if i % 4 == 0: reg_step()`)
            yield self.report(applied_in[0][0], "several" if len(steps) > 1 else "default",
                              assumed=context.targets.assumed("keras"), optimizer=name, replica=steps[0],
                              replicas=", ".join(f"`{step}`" for step in steps))

