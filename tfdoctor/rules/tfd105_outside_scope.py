from __future__ import annotations

import re
from typing import Iterator

import libcst as cst

from tfdoctor.lint.facts import AssignFact, ModuleFacts, reads
from tfdoctor.lint.findings import Severity, Violation
from tfdoctor.lint.rule import Context, Rule

_MODEL = re.compile(r"^keras\.(models\.)?(Model|Sequential|load_model)$|^keras\.(saving\.)?load_model$|^keras\.applications\.")
_OPTIMIZER = re.compile(r"^keras\.optimizers\.(legacy\.)?[A-Z]\w*$")
_METRIC = re.compile(r"^keras\.metrics\.[A-Z]\w*$")


class OutsideScope(Rule):
    """
    ## What it does
    Finds a Keras model, optimizer or metric created outside `strategy.scope()` that is then used with the
    strategy: compiled inside the scope, or used in a replica function. Code in a function that is called
    from inside the scope counts as inside.

    ## Why it is bad
    Variables created outside the scope are ordinary single-device variables, not mirrored ones. Depending
    on the version you get "Mixing different tf.distribute.Strategy objects", "... was not created in the
    distribution strategy scope", or a run that silently trains one copy on one device.

    ## Example
    ```python
    import tensorflow as tf
    strategy = tf.distribute.MirroredStrategy()
    model = tf.keras.Sequential([tf.keras.layers.Dense(10)])  # TFD105
    with strategy.scope():
        model.compile(optimizer="adam", loss="mse")
    ```

    ## Use instead
    ```python
    import tensorflow as tf
    strategy = tf.distribute.MirroredStrategy()
    with strategy.scope():
        model = tf.keras.Sequential([tf.keras.layers.Dense(10)])
        model.compile(optimizer="adam", loss="mse")
    ```
    """

    code = "TFD105"
    name = "outside-scope"
    severity = Severity.ERROR
    summary = "A Keras model, optimizer or metric is created outside `strategy.scope()` but used with the strategy."
    MESSAGES = {"default": "`{var}` ({kind}) is created outside `strategy.scope()` but {use}"}
    triggers = ("scope", "run")
    INVALID = (
        # an optimizer created at module level and used in a replica function
        """import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
with strategy.scope():
    model = build_model()
opt = tf.keras.optimizers.Adam(1e-3)  # TFD105
def replica(x, y):
    with tf.GradientTape() as tape:
        loss = compute(model(x), y)
    opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
@tf.function
def step(x, y):
    strategy.run(replica, args=(x, y))
""",
        # a model built in __init__ before the scope, used by self.strategy.run
        """from tensorflow import keras
import tensorflow as tf
class Trainer:
    def __init__(self, strategy):
        self.strategy = strategy
        self.model = keras.Sequential([keras.layers.Dense(4)])  # TFD105
    def train_step(self, x):
        return self.model(x)
    @tf.function
    def step(self, x):
        return self.strategy.run(self.train_step, args=(x,))
""",
        # a metric created outside, updated in the replica function
        """import keras
import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
acc = keras.metrics.SparseCategoricalAccuracy()  # TFD105
def replica(x, y):
    acc.update_state(y, model(x))
@tf.function
def step(x, y):
    strategy.run(replica, args=(x, y))
""",
    )
    VALID = (
        # built by a function that is called from inside the scope
        """import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
def create_model():
    model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
    model.compile(optimizer=tf.keras.optimizers.Adam(), loss="mse")
    return model
with strategy.scope():
    model = create_model()
model.fit(ds, epochs=2)
""",
        # created outside the scope but never used with the strategy (single-device evaluation)
        """import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
probe = tf.keras.Sequential([tf.keras.layers.Dense(1)])
probe.compile(loss="mse")
""",
        # a trainer whose __init__ builds the model, constructed inside the scope
        """import tensorflow as tf
class Trainer:
    def __init__(self, strategy):
        self.strategy = strategy
        self.model = tf.keras.Sequential([tf.keras.layers.Dense(4)])
        self.opt = tf.keras.optimizers.Adam()
    def train_step(self, x):
        return self.model(x)
    @tf.function
    def step(self, x):
        return self.strategy.run(self.train_step, args=(x,))
strategy = tf.distribute.MirroredStrategy()
with strategy.scope():
    trainer = Trainer(strategy)
""",
        # rebuilt inside the scope before use
        """import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
opt = tf.keras.optimizers.SGD()
with strategy.scope():
    opt = tf.keras.optimizers.SGD()
    model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
    model.compile(optimizer=opt, loss="mse")
""",
    )

    def check(self, facts: ModuleFacts, context: Context) -> Iterator[Violation]:
        if not facts.scope_blocks and not facts.run_calls:
            return
        replicas = facts.transitive_callees(facts.replica_functions)
        for assign in facts.assigns:
            kind = self._created(facts, assign)
            if kind is None or len(assign.targets) != 1 or facts.in_strategy_scope(assign.scope, assign.withs):
                continue
            var = assign.targets[0]
            if self._reassigned_in_scope(facts, var, assign):
                continue
            use = self._strategy_use(facts, var, replicas)
            if use is not None:
                yield self.report(assign.value, statement=assign.statement, var=var, kind=kind, use=use)

    @staticmethod
    def _created(facts: ModuleFacts, assign: AssignFact) -> str | None:
        if not isinstance(assign.value, cst.Call) or assign.operator != "=":
            return None
        name = facts.resolve(assign.value.func) or ""
        if _MODEL.search(name):
            return "a Keras model"
        if _OPTIMIZER.search(name):
            return "a Keras optimizer"
        if _METRIC.search(name):
            return "a Keras metric"
        return None

    @staticmethod
    def _reassigned_in_scope(facts: ModuleFacts, var: str, original: AssignFact) -> bool:
        return any(
            a is not original and var in a.targets and facts.in_strategy_scope(a.scope, a.withs)
            for a in facts.assigns
        )

    @staticmethod
    def _strategy_use(facts: ModuleFacts, var: str, replicas) -> str | None:
        for block in facts.scope_blocks:
            for call in block.calls:
                if call.func == f"{var}.compile":
                    return "is compiled inside `strategy.scope()`"
        for replica in replicas:
            for call in replica.calls:
                if (call.func is not None and reads({call.func}, var)) or any(reads(n, var) for n in call.arg_names):
                    return f"is used in the replica function `{replica.name}`"
        return None
