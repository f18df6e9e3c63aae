from __future__ import annotations

import re
from typing import Iterator

import libcst as cst

from tfdoctor.lint.dataflow import keras3_unknown
from tfdoctor.lint.facts import AssignFact, CallFact, ModuleFacts, Scope, reads
from tfdoctor.lint.names import dotted
from tfdoctor.lint.findings import Severity, Violation
from tfdoctor.lint.rule import Context, Rule

_MODEL = re.compile(r"^keras\.(models\.)?(Model|Sequential|load_model)$|^keras\.(saving\.)?load_model$|^keras\.applications\.")
_OPTIMIZER = re.compile(r"^(keras|tensorflow_addons)\.optimizers\.(legacy\.)?[A-Z]\w*$")
_METRIC = re.compile(r"^keras\.metrics\.[A-Z]\w*$")
_OPTIMIZER_KIND = "a Keras optimizer"
_METRIC_KIND = "a Keras metric"
_KERAS2_FINE = (_OPTIMIZER_KIND, _METRIC_KIND)  # made outside the scope, Keras 2 trains and counts right


class OutsideScope(Rule):
    """
    ## What it does
    Finds a Keras model, optimizer or metric created outside `strategy.scope()` (by its constructor, picked
    from a dict of constructors, or by a helper of this or another project module that returns one) that is
    then used with the strategy, through that same variable:
    compiled inside the scope (also with it as `compile`'s argument, or by a function it is passed to), or
    used in a replica function. Code in a function that is called from inside the scope counts as inside,
    also a function or class that only the project's other modules call, each time inside the scope. A
    factory that returns what it creates and that the module never calls, and a class that asks for the
    current strategy (`tf.distribute.get_strategy()`), are left to their callers elsewhere. Under Keras 2 an
    optimizer or a metric made outside the scope is left alone too: Keras 2 creates an optimizer's slots where
    it is first used, under the strategy (tf_keras 2.21 trains so, compiled in the scope or applied in
    `strategy.run`, with mirrored slots), and a metric updated in `strategy.run` counts every replica's
    examples; Keras 3 stops with "Mixing different tf.distribute.Strategy objects", so there the message says
    which Keras it assumed. That Keras 3 must come from the project's pins, its code or `--target-keras`: the
    installed or newest release is not enough (except in a profile's run, which meets the installed one).

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
        # an optimizer created at module level and used in a replica function (Keras 3)
        """# tfdoctor: target-keras=3.0
import tensorflow as tf
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
        # a metric created outside, updated in the replica function (Keras 3)
        """# tfdoctor: target-keras=3.0
import keras
import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
acc = keras.metrics.SparseCategoricalAccuracy()  # TFD105
def replica(x, y):
    acc.update_state(y, model(x))
@tf.function
def step(x, y):
    strategy.run(replica, args=(x, y))
""",
        # picked from a dict of optimizers outside the scope, compiled inside it (Keras 3)
        """# tfdoctor: target-keras=3.0
import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
optimizer = {  # TFD105
    "adam": tf.keras.optimizers.Adam(1e-3),
    "sgd": tf.keras.optimizers.SGD(1e-2, momentum=0.9),
}[optimizer_type]
with strategy.scope():
    model = build_model()
    model.compile(optimizer=optimizer, loss="mse")
""",
    )
    VALID = (
        # a subclassed model first called in the replica function builds its variables there, under the
        # strategy: mirrored (measured with TF 2.21 on two logical CPUs, Keras 3.15 and tf_keras alike)
        """# tfdoctor: target-keras=3.0
import tensorflow as tf
class MyModel(tf.keras.Model):
    def __init__(self):
        super().__init__()
        self.dense = tf.keras.layers.Dense(10)
    def call(self, x):
        return self.dense(x)
strategy = tf.distribute.MirroredStrategy()
model = MyModel()
def train_step(x):
    return tf.reduce_mean(model(x))
@tf.function
def distributed_step(x):
    return strategy.run(train_step, args=(x,))
""",
        # Keras 2: an optimizer made outside the scope gets its slots where it is first used, under the strategy
        """# tfdoctor: target-keras=2.15
import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
optimizer = tf.keras.optimizers.Adam(1e-3)
with strategy.scope():
    model = build_model()
    model.compile(optimizer=optimizer, loss="mse")
model.fit(dataset, epochs=3)
""",
        # the scope entered through a helper named for it (TensorFlow's official models)
        """import tensorflow as tf
from official.utils import distribution_utils
strategy = tf.distribute.MirroredStrategy()
with distribution_utils.get_strategy_scope(strategy):
    model = build_model()
    metric = tf.keras.metrics.Mean()
@tf.function
def step(x):
    def replica(x):
        metric.update_state(model(x))
    strategy.run(replica, args=(x,))
""",
        # an override that the base class (another module) calls, perhaps inside the scope
        """import tensorflow as tf
import training
class Supervised(training.Experiment):
    def create_model(self):
        self.model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
        self.optimizer = tf.keras.optimizers.SGD(0.1)
    def train_step(self, x):
        def step_fn(x):
            with tf.GradientTape() as tape:
                loss = self.model(x)
            grads = tape.gradient(loss, self.model.trainable_variables)
            self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables))
        self.strategy.run(step_fn, args=(x,))
""",
        # another function's variable of the same name: the optimizer compiled in the scope is made in it
        """import tensorflow as tf
def train(model, strategy):
    with strategy.scope():
        optimizer = tf.keras.optimizers.Adam()
        model.compile(optimizer=optimizer, loss="mse")
def evaluate(model):
    optimizer = tf.keras.optimizers.Adam()
    model.compile(optimizer=optimizer, loss="mse")
    return model.evaluate(data)
""",
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
        # built by a method called through an alias of self, inside the scope
        """import tensorflow as tf
class Process:
    def init(self):
        this = self
        with self.strategy.scope():
            this.init_net()
    def init_net(self):
        self.model = tf.keras.Sequential([tf.keras.layers.Dense(4)])
    def replica(self, x):
        return self.model(x)
    @tf.function
    def step(self, x):
        return self.strategy.run(self.replica, args=(x,))
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
            if (self._reassigned_in_scope(facts, var, assign) or self._made_by_a_factory(facts, assign, var)
                    or _called_in_scope_elsewhere(facts, assign.scope)):
                continue
            if kind in _KERAS2_FINE and keras3_unknown(facts, context.targets.keras, context.run_code):
                continue  # Keras 2 makes an optimizer's slots where it is first used; its metrics sum right
            use = self._strategy_use(facts, var, assign, replicas)
            if use is None:
                continue
            assumed = self.assumed(context, "keras", facts, assign.value) if kind in _KERAS2_FINE else None
            yield self.report(assign.value, statement=assign.statement, var=var, kind=kind, use=use, assumed=assumed)

    @staticmethod
    def _created(facts: ModuleFacts, assign: AssignFact) -> str | None:
        """What a Keras constructor makes: called here, picked from a dict of them (`{"adam": Adam(),
        "sgd": SGD()}[name]`), or returned by a helper (of this or another module) whose every return is the
        same kind of constructor."""
        if assign.operator == "=" and isinstance(assign.value, cst.Subscript) and isinstance(assign.value.value, cst.Dict):
            kinds = {_kind(facts, element.value) if isinstance(element, cst.DictElement) else None
                     for element in assign.value.value.elements}
            return kinds.pop() if len(kinds) == 1 else None
        if not isinstance(assign.value, cst.Call) or assign.operator != "=":
            return None
        kind = _kind(facts, assign.value)
        if kind is not None or facts.resolve(assign.value.func) is not None and facts.foreign(
                dotted(assign.value.func) or "") is None:
            return kind
        origins = facts.values_of(assign.value, assign.scope, assign.order)
        kinds = {_kind(o.model, o.expr) if o.kind == "value" and not o.path and o.expr is not assign.value else None
                 for o in origins}
        return kinds.pop() if len(kinds) == 1 else None

    @staticmethod
    def _made_by_a_factory(facts: ModuleFacts, assign: AssignFact, var: str) -> bool:
        """Created in a function that returns it and that this module never calls, in a method of a subclass
        that this module never calls (an override its base class calls, perhaps inside the scope), or in a
        class that asks for the current strategy (`tf.distribute.get_strategy()`, which only makes sense
        inside a scope): its callers, elsewhere, decide whether it runs inside `strategy.scope()`."""
        scope = assign.scope
        class_name = facts.enclosing_class(scope)
        if (class_name is not None and scope.is_function and scope.name != "__init__"
                and not facts.callers_of(scope) and _subclass(facts, class_name)):
            return True
        if class_name is not None and any(
                facts.resolve(c.func) == "tensorflow.distribute.get_strategy"
                for s in facts.scopes if facts.enclosing_class(s) == class_name for c in s.calls):
            return True
        return scope.is_function and not facts.callers_of(scope) and any(
            dotted(r.value) == var or var in r.names for r in scope.returns
        )

    @staticmethod
    def _reassigned_in_scope(facts: ModuleFacts, var: str, original: AssignFact) -> bool:
        return any(
            a is not original and var in a.targets and facts.in_strategy_scope(a.scope, a.withs)
            for a in facts.assigns
        )

    @staticmethod
    def _strategy_use(facts: ModuleFacts, var: str, assign: AssignFact, replicas) -> str | None:
        """How the object `assign` makes is used under the strategy: by calls that see this binding of `var`
        (not another function's variable of the same name)."""
        def sees(call: CallFact) -> bool:
            return any(found is assign for found in facts.definitions(var, call.scope, call.order))

        for block in facts.scope_blocks:
            for call in block.calls:
                if not sees(call):
                    continue
                if call.func == f"{var}.compile":
                    return "is compiled inside `strategy.scope()`"
                if call.attr == "compile" and any(reads(n, var) for n in call.arg_names):
                    return "is given to `compile` inside `strategy.scope()`"
                if _compiled_by(facts, call, var):
                    return f"is compiled inside `strategy.scope()` by `{call.func}`"
        for replica in replicas:
            for call in replica.calls:
                if ((call.func is not None and reads({call.func}, var)) or any(reads(n, var) for n in call.arg_names)) \
                        and sees(call):
                    return f"is used in the replica function `{replica.name}`"
        return None


def _called_in_scope_elsewhere(facts: ModuleFacts, scope: Scope) -> bool:
    """Whether the module-level function (or class, for `__init__`) around `scope` is never called here and
    only called inside `strategy.scope()` by the project's other modules (`Evaluation(...)` in train.py)."""
    function: Scope | None = scope
    while function is not None and function.parent is not None and function.parent.is_function:
        function = function.parent
    if function is None or not function.is_function or facts.callers_of(function) or facts.loader is None:
        return False
    calls = facts.loader.callers(function)
    return bool(calls) and all(
        call.scope.owner.in_strategy_scope(call.scope, call.withs) for call in calls)  # type: ignore[union-attr]


def _subclass(facts: ModuleFacts, class_name: str) -> bool:
    """A class with a base other than `object`: its base may call its methods."""
    found = facts.class_named(class_name)
    return found is not None and any(base != "object" for base in found.bases)


def _kind(facts: ModuleFacts, value: cst.CSTNode) -> str | None:
    if not isinstance(value, cst.Call):
        return None
    name = facts.resolve(value.func) or ""
    if _MODEL.search(name):
        return "a Keras model"
    if _OPTIMIZER.search(name):
        return _OPTIMIZER_KIND
    if _METRIC.search(name):
        return _METRIC_KIND
    return None


def _compiled_by(facts: ModuleFacts, call: CallFact, var: str) -> bool:
    """`var` given to a function (of this or another module) that passes it on to `compile`."""
    given = [(index, arg) for index, arg in enumerate(call.node.args) if dotted(arg.value) == var]
    if not given:
        return False
    for function in facts.callables_of(call.node.func, call.scope, before=call.order):
        params = function.value_params()
        for index, arg in given:
            param = arg.keyword.value if arg.keyword is not None else params[index] if index < len(params) else None
            if param is not None and any(c.attr == "compile" and any(reads(n, param) for n in c.arg_names)
                                         for c in function.calls):
                return True
    return False
