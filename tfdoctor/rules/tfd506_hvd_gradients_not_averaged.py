from __future__ import annotations

import re
from typing import Iterator

import libcst as cst

from tfdoctor.lint.dataflow import (
    calls_any, definitions, horovod_calls, horovod_init, horovod_member, horovod_scope, horovod_task_farm,
)
from tfdoctor.lint.facts import AssignFact, CallFact, ModuleFacts, Scope
from tfdoctor.lint.findings import Severity, Violation
from tfdoctor.lint.names import call_arg, dotted, literal_str
from tfdoctor.lint.rule import Context, Rule

# Any of these in the module means gradients are averaged somewhere (or by hand): stay silent.
_AVERAGING = ("DistributedOptimizer", "DistributedGradientTape", "PartialDistributedGradientTape", "allreduce",
              "grouped_allreduce", "DistributedTrainer", "DistributedOptimizerWrapper")
# An `if` on these chooses between a Horovod run and a single process (`if use_horovod:`, `if hvd.size() > 1:`):
# an optimizer left unwrapped in one of its branches is right there.
_DISTRIBUTION_TEST = re.compile(r"hvd|horovod|distribut|dist|multi|size|rank|world|gpu|worker|parallel|single|local",
                                re.IGNORECASE)


def known_optimizer(facts: ModuleFacts, expr: cst.BaseExpression | None, scope: Scope, before: int,
                    depth: int = 0) -> bool:
    """Whether an optimizer expression is certainly a plain Keras/TF optimizer built in this module: a name
    string (`"adam"`), a constructor call, or a variable every assignment of which is one of these."""
    if expr is None or depth > 3:
        return False
    if literal_str(expr) is not None:
        return True
    if isinstance(expr, cst.Call):
        name = facts.resolve(expr.func) or ""
        return (name.startswith(("keras.optimizers.", "tensorflow.optimizers.", "tensorflow.train."))
                and name.split(".")[-1][:1].isupper() and "LossScale" not in name)
    name = dotted(expr)
    if name is None:
        return False
    assigned = definitions(facts, name, scope, before)
    return bool(assigned) and all(a.operator == "=" and known_optimizer(facts, a.value, a.scope, a.order, depth + 1)
                                  for a in assigned)


class HvdGradientsNotAveraged(Rule):
    """
    ## What it does
    In a Horovod program (one that calls `hvd.init()`), finds a Keras `compile(...)` whose optimizer is a
    plain optimizer, or a custom loop's `apply_gradients(...)` on one, when the module uses neither
    `hvd.DistributedOptimizer` nor `hvd.DistributedGradientTape` (nor `hvd.allreduce` by hand). The optimizer
    must be built in the module (a name such as `"adam"` or a constructor): one that comes from elsewhere may
    be wrapped there, so it is not flagged.

    In a module that does wrap its optimizer, it also finds a builder whose `if`/`elif`/`else` branches make the
    optimizer one way each and wrap it in some branches only (`if name == "sgd": opt =
    hvd.DistributedOptimizer(...)` / `else: opt = tf.train.AdamOptimizer(lr)`), when nothing wraps it after the
    branches, or that returns a wrapped optimizer on some paths and a plain one on others. A builder with any `if`
    on Horovod, distribution, the worker count or a rank (`if use_horovod:` ... `else:` a single-process
    optimizer) is right and left alone, as is one whose callers wrap what it returns.

    This rule and TFD507 can both report one custom loop's `apply_gradients`: they name two different missing
    pieces (averaging the gradients, broadcasting the first variables).

    A program that calls none of Horovod's collectives and shares out independent runs by rank (`if n %
    hvd.size() == hvd.rank():` around training, in its body or in the functions it calls) trains one model per
    run on purpose, and is left alone.

    Code that shows its Horovod has one rank is left alone: every `hvd.init()` runs in a function that Spark tasks
    run (`rdd.foreach(train)`, with no Horovod launcher), or the program calls none of Horovod's collectives and
    spreads its model over the GPUs inside the process (`multi_gpu_model`, `MirroredStrategy`).

    ## Why it is bad
    Horovod starts one process per GPU. Without the distributed optimizer or tape, each process applies its
    own gradients and nothing is ever averaged: the processes train W unrelated models on their own shards,
    and the saved one has seen 1/W of the data.

    ## Example
    ```python
    import tensorflow as tf
    import horovod.tensorflow.keras as hvd
    hvd.init()
    opt = tf.keras.optimizers.SGD(0.01 * hvd.size())
    model.compile(optimizer=opt, loss="mse")  # TFD506
    ```

    ## Use instead
    ```python
    import tensorflow as tf
    import horovod.tensorflow.keras as hvd
    hvd.init()
    opt = hvd.DistributedOptimizer(tf.keras.optimizers.SGD(0.01 * hvd.size()))
    model.compile(optimizer=opt, loss="mse")
    ```
    """

    code = "TFD506"
    name = "hvd-gradients-not-averaged"
    severity = Severity.ERROR
    summary = "Horovod: the optimizer is not wrapped in `hvd.DistributedOptimizer` and no `DistributedGradientTape`."
    MESSAGES = {
        "compile": "this optimizer is not wrapped in `hvd.DistributedOptimizer`, so Horovod never averages the gradients",
        "apply_gradients": "neither `hvd.DistributedGradientTape` nor `hvd.DistributedOptimizer` averages these gradients",
        "branch": "this branch's optimizer is not wrapped in `hvd.DistributedOptimizer`, unlike the other branch's",
    }
    triggers = ("horovod",)
    INVALID = (
        """import tensorflow as tf
import horovod.tensorflow as hvd
hvd.init()
opt = tf.optimizers.Adam(0.001 * hvd.size())
@tf.function
def step(x, y):
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x))
    grads = tape.gradient(loss, model.trainable_variables)
    opt.apply_gradients(zip(grads, model.trainable_variables))  # TFD506
""",
        """from horovod import tensorflow as hvd
import keras
hvd.init()
model.compile("adam", loss="mse")  # TFD506
""",
        # wrapped in one branch of the builder only
        """import tensorflow as tf
import horovod.tensorflow as hvd
hvd.init()
def build_optimizer(name, lr):
    if name == "momentum":
        opt = hvd.DistributedOptimizer(tf.train.MomentumOptimizer(lr * hvd.size(), 0.9))
    elif name == "adam":
        opt = tf.train.AdamOptimizer(lr * hvd.size())  # TFD506
    return opt
""",
    )
    VALID = (
        # the tape averages the gradients
        """import tensorflow as tf
import horovod.tensorflow as hvd
hvd.init()
opt = tf.optimizers.Adam(0.001 * hvd.size())
def step(x, y):
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x))
    tape = hvd.DistributedGradientTape(tape)
    grads = tape.gradient(loss, model.trainable_variables)
    opt.apply_gradients(zip(grads, model.trainable_variables))
""",
        # the optimizer comes from another module, which may wrap it
        """import tensorflow as tf
import horovod.tensorflow.keras as hvd
from .optim import build_optimizer
hvd.init()
model.compile(optimizer=build_optimizer(), loss="mse")
""",
        # a branch on Horovod: the other branch is a single process
        """import tensorflow as tf
import horovod.tensorflow as hvd
def build_optimizer(lr, use_horovod):
    if use_horovod:
        hvd.init()
        opt = hvd.DistributedOptimizer(tf.train.MomentumOptimizer(lr * hvd.size(), 0.9))
    else:
        opt = tf.train.MomentumOptimizer(lr, 0.9)
    return opt
""",
        # every branch's optimizer is wrapped after the branches
        """import tensorflow as tf
import horovod.tensorflow as hvd
hvd.init()
def build_optimizer(name, lr):
    if name == "momentum":
        opt = tf.train.MomentumOptimizer(lr, 0.9)
    else:
        opt = tf.train.AdamOptimizer(lr)
    return hvd.DistributedOptimizer(opt)
""",
        # not a Horovod program
        """import tensorflow as tf
model.compile(optimizer="adam", loss="mse")
""",
        # a regular expression, not a model
        """import re
import horovod.tensorflow.keras as hvd
hvd.init()
pattern = re.compile("adam")
""",
        # Horovod shares out independent runs: each rank trains the nodes of its share, one model each
        """import tensorflow as tf
import horovod.tensorflow.keras as hvd
hvd.init()
def train_node(n):
    model = build_model(n)
    model.compile(optimizer=tf.keras.optimizers.Adam(1e-3), loss="mse")
    model.fit(x[n], y[n], epochs=10)
    model.save_weights(f"node{n}.weights.h5")
for n in range(num_nodes):
    if n % hvd.size() == hvd.rank():
        train_node(n)
""",
    )

    def check(self, facts: ModuleFacts, context: Context) -> Iterator[Violation]:
        if not horovod_init(facts) or horovod_task_farm(facts):
            return  # ranks that each train runs of their own have no gradients to average
        if horovod_calls(facts, *_AVERAGING) or calls_any(facts, "allreduce"):
            for node, statement in _unwrapped_branches(facts):
                yield self.report(node, "branch", statement=statement)
            return
        for call in facts.method_calls("compile", "apply_gradients"):
            if self._plain_optimizer(facts, call) and horovod_scope(facts, call.scope):
                yield self.report(call, call.attr or "compile")

    @staticmethod
    def _plain_optimizer(facts: ModuleFacts, call: CallFact) -> bool:
        if any(a.star for a in call.node.args) or facts.resolve(call.func) is not None:  # `re.compile(...)`
            return False
        if call.attr == "compile":
            optimizer = call_arg(call.node, 0, "optimizer")
            return optimizer is None or known_optimizer(facts, optimizer, call.scope, call.order)
        return known_optimizer(facts, call.receiver, call.scope, call.order)


def _unwrapped_branches(facts: ModuleFacts) -> Iterator[tuple[cst.CSTNode, cst.CSTNode]]:
    """Plain optimizers (and their statements) a builder makes in some branches while it wraps the one of
    another branch in `hvd.DistributedOptimizer`: assigned to a name that nothing wraps after the branches,
    or returned beside wrapped ones."""
    calls = horovod_calls(facts, "DistributedOptimizer")
    wraps = [a for a in facts.assigns if len(a.targets) == 1 and any(a.value is c.node for c in calls)]
    for scope in {id(c.scope): c.scope for c in calls}.values():
        if _builder_excused(facts, scope, calls):
            continue
        mine = [w for w in wraps if w.scope is scope]
        returned = [r.value for r in scope.returns]
        wrapped = [v for v in returned if any(v is c.node for c in calls)]
        if sum(c.scope is scope for c in calls) == len(mine):
            for assign in _unwrapped_assignments(facts, scope, mine):
                yield assign.value, assign.statement
        elif wrapped and sum(c.scope is scope for c in calls) == len(wrapped):
            plain = [v for v in returned if isinstance(v, cst.Call) and known_optimizer(facts, v, scope, 1 << 62)]
            if len(wrapped) + len(plain) == len(returned):
                for value in plain:
                    fact = facts.call_fact(value)
                    if fact is not None:
                        yield value, fact.statement


def _builder_excused(facts: ModuleFacts, scope: Scope, wraps: list[CallFact]) -> bool:
    """Whether a builder's branches may rightly differ: an `if` of it decides between Horovod and one process,
    or its callers wrap what it returns."""
    return _wrapped_by_callers(facts, scope, wraps) or any(
        fact.scope is scope and _DISTRIBUTION_TEST.search(" ".join(fact.names)) for fact in facts.if_facts)


def _unwrapped_assignments(facts: ModuleFacts, scope: Scope, wraps: list[AssignFact]) -> Iterator[AssignFact]:
    """Plain optimizers assigned in a branch of an `if` whose other branch assigns the same name a wrapped one,
    when no wrap of the name follows."""
    for assign in scope.assigns:
        if len(assign.targets) != 1 or not assign.blocks or not isinstance(assign.value, cst.Call) or \
                not known_optimizer(facts, assign.value, scope, assign.order):
            continue
        name = assign.targets[0]
        same = [w for w in wraps if w.targets[0] == name]
        if not any(w.order > assign.order and name in w.names and not _exclusive(assign, w) for w in same) \
                and any(_exclusive(assign, w) for w in same):
            yield assign


def _wrapped_by_callers(facts: ModuleFacts, scope: Scope, wraps: list[CallFact]) -> bool:
    """Whether a caller of the function gives its result to `hvd.DistributedOptimizer`, directly or through
    the name it binds it to."""
    for caller in facts.callers_of(scope):
        bound = {t for a in caller.scope.assigns if a.value is caller.node for t in a.targets}
        for wrap in wraps:
            if any(a.value is caller.node for a in wrap.node.args) or any(bound & names for names in wrap.arg_names):
                return True
    return False


def _exclusive(one: AssignFact, other: AssignFact) -> bool:
    """Whether two assignments lie in branches of one `if` that exclude each other."""
    return any(b.other_branch is not None and b.other_branch.holds(other.order) for b in one.blocks) or any(
        b.other_branch is not None and b.other_branch.holds(one.order) for b in other.blocks)