"""Questions about values that several rules ask, answered from module facts (never from the tree):
where a batch comes from, how a loss is scaled, whether a batch size is global, what a training step is."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterator, Literal

import libcst as cst

from tfdoctor.lint.facts import (
    DISTRIBUTE_DATASET_METHODS,
    END_OF_SCOPE,
    AssignFact,
    CallFact,
    DatasetChain,
    LoopFact,
    ModuleFacts,
    Scope,
)
from tfdoctor.lint.names import call_arg, dotted, literal_str

_REPLICA_COUNT = re.compile(r"num_replicas_in_sync|get_per_replica_batch_size|num_replicas", re.IGNORECASE)
_GLOBAL_WORD = re.compile(r"global|num_replicas_in_sync", re.IGNORECASE)
TRAINING_ATTRS = frozenset({"apply_gradients", "minimize", "train_on_batch"})


# -- assignments ------------------------------------------------------------------------------------------
def definitions(facts: ModuleFacts, name: str, scope: Scope, before: int | None = None) -> list[AssignFact]:
    """Assignments of `name` visible from `scope` (the innermost scope that assigns it), in source order.
    `self.x` is looked up across the methods of the enclosing class. With `before`, only earlier ones."""
    if name.startswith("self."):
        class_name = facts.enclosing_class(scope)
        found = [a for s in facts.scopes if class_name and facts.enclosing_class(s) == class_name
                 for a in s.assignments_of(name)]
        return sorted(found, key=lambda a: a.order)
    current: Scope | None = scope
    while current is not None:
        assigned = current.assignments_of(name)
        if current is scope and before is not None:
            assigned = [a for a in assigned if a.order < before]
        if assigned:
            return assigned
        current = current.parent
    return []


def mentions_replica_count(facts: ModuleFacts, names: frozenset[str], scope: Scope, depth: int = 0) -> bool:
    """Whether an expression's names come from `num_replicas_in_sync`/`get_per_replica_batch_size`."""
    if any(_REPLICA_COUNT.search(name) for name in names):
        return True
    if depth > 3:
        return False
    return any(
        mentions_replica_count(facts, a.names, a.scope, depth + 1)
        for name in names if "." not in name or name.startswith("self.")
        for a in definitions(facts, name, scope)
    )


def is_global_batch(facts: ModuleFacts, names: frozenset[str], scope: Scope) -> bool:
    """Whether a divisor is the global batch: named so, or computed from the replica count."""
    return any(_GLOBAL_WORD.search(name) for name in names) or mentions_replica_count(facts, names, scope)


# -- where batches come from ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Provenance:
    kind: Literal["distributed", "undistributed"]
    reason: str
    node: cst.CSTNode | None = None


def is_python_iterator_class(facts: ModuleFacts, name: str | None) -> str | None:
    """A module class whose instances yield batches from Python (`__next__`, generator `__iter__`,
    or a `keras.utils.Sequence`/`PyDataset` subclass): returns how to describe it."""
    if name is None:
        return None
    class_fact = facts.class_named(name)
    if class_fact is None:
        return None
    if "__next__" in class_fact.methods or (
        "__iter__" in class_fact.methods and class_fact.methods["__iter__"].is_generator
    ):
        return f"the Python iterator class `{name}`"
    for base in class_fact.bases:
        resolved = facts.resolve(base) or base
        if resolved.endswith(("utils.Sequence", "utils.PyDataset")) or base in ("Sequence", "PyDataset"):
            return f"the Python `{resolved.split('.')[-1]}` class `{name}`"
    return None


def iterable_provenance(facts: ModuleFacts, expr: cst.BaseExpression | None, scope: Scope, before: int,
                        depth: int = 0) -> Provenance | None:
    """What iterating over `expr` yields."""
    if expr is None or depth > 6:
        return None
    if isinstance(expr, cst.Call):
        name = dotted(expr.func)
        if name in ("enumerate", "iter", "tqdm", "tqdm.tqdm") or (facts.resolve(expr.func) or "").endswith("tqdm"):
            return iterable_provenance(facts, call_arg(expr, 0, None), scope, before, depth + 1)
        if isinstance(expr.func, cst.Attribute) and expr.func.attr.value in DISTRIBUTE_DATASET_METHODS:
            return Provenance("distributed", "a distributed dataset")
        described = is_python_iterator_class(facts, name)
        if described:
            return Provenance("undistributed", described, expr)
        functions = facts.callables_of(expr.func, scope)
        if len(functions) == 1 and functions[0].is_generator:
            return Provenance("undistributed", f"the Python generator `{functions[0].name}`", expr)
    if facts.dataset_chain(expr, scope, before) is not None:
        return Provenance("undistributed", "a `tf.data.Dataset` that was never distributed", expr)
    name = dotted(expr)
    if name is not None:
        found = definitions(facts, name, scope, before)
        if found:
            last = found[-1]
            return iterable_provenance(facts, last.value, last.scope, last.order, depth + 1)
    return None


def value_provenance(facts: ModuleFacts, expr: cst.BaseExpression | None, scope: Scope, before: int,
                     depth: int = 0) -> Provenance | None:
    """Where a value given to `strategy.run` comes from, when the module shows it."""
    if expr is None or depth > 6:
        return None
    if isinstance(expr, cst.Call):
        if dotted(expr.func) == "next":
            return iterable_provenance(facts, call_arg(expr, 0, None), scope, before, depth + 1)
        resolved = facts.resolve(expr.func) or ""
        if resolved.startswith("numpy."):
            return Provenance("undistributed", "a numpy array", expr)
        if resolved in ("tensorflow.constant", "tensorflow.convert_to_tensor"):
            return Provenance("undistributed", "a plain tensor", expr)
        return None
    name = dotted(expr)
    if name is None or "." in name:
        return None
    loops = [lp for lp in scope.loops if name in lp.targets and lp.iter_expr is not None and lp.order < before]
    found = [a for a in definitions(facts, name, scope, before) if a.scope is scope]
    if loops and (not found or loops[-1].order > found[-1].order):
        return iterable_provenance(facts, loops[-1].iter_expr, scope, loops[-1].order, depth + 1)
    if found:
        last = found[-1]
        if len(last.targets) > 1 and isinstance(last.value, cst.Call) and dotted(last.value.func) == "next":
            return iterable_provenance(facts, call_arg(last.value, 0, None), scope, last.order, depth + 1)
        return value_provenance(facts, last.value, scope, last.order, depth + 1)
    if name in scope.value_params():
        return _parameter_provenance(facts, scope, name, depth)
    return None


def _parameter_provenance(facts: ModuleFacts, scope: Scope, param: str, depth: int) -> Provenance | None:
    """A parameter's provenance when every call site of its function agrees."""
    callers = facts.callers_of(scope)
    if not callers:
        return None
    index = scope.value_params().index(param)
    results = []
    for caller in callers:
        argument = call_arg(caller.node, index, param)
        results.append(value_provenance(facts, argument, caller.scope, caller.order, depth + 1))
    if all(r is not None and r.kind == "undistributed" for r in results):
        return results[0]
    return None


# -- losses -----------------------------------------------------------------------------------------------
LossKind = Literal["mean", "sum", "scaled", "keras-default", "keras-default-scaled"]
_MEAN = frozenset({"tensorflow.reduce_mean", "tensorflow.math.reduce_mean", "keras.ops.mean", "keras.backend.mean"})
_SUM = frozenset({"tensorflow.reduce_sum", "tensorflow.math.reduce_sum", "keras.ops.sum", "keras.backend.sum"})
_SCALED = frozenset({"tensorflow.nn.compute_average_loss", "tensorflow.nn.scale_regularization_loss"})
_DEFAULT_REDUCTIONS = frozenset({"sum_over_batch_size", "auto", "SUM_OVER_BATCH_SIZE", "AUTO"})


@dataclass(frozen=True)
class Loss:
    kind: LossKind
    node: cst.CSTNode  # the expression that makes it so (for the finding's position)
    statement: cst.CSTNode | None


def loss_kind(facts: ModuleFacts, expr: cst.BaseExpression | None, scope: Scope, before: int,
              depth: int = 0) -> Loss | None:
    """How a scalar loss is reduced: a per-replica mean, an unscaled sum, scaled by the global batch, or
    a Keras loss object with its default reduction. None when the module does not show it."""
    if expr is None or depth > 6:
        return None
    if isinstance(expr, cst.Call):
        resolved = facts.resolve(expr.func)
        if resolved in _MEAN:
            return Loss("mean", expr, None)
        if resolved in _SUM:
            return Loss("sum", expr, None)
        if resolved in _SCALED:
            return Loss("scaled", expr, None)
        if keras_loss_reduction(facts, expr.func, scope) in _DEFAULT_REDUCTIONS:
            return Loss("keras-default", expr, None)
        return None
    if isinstance(expr, cst.BinaryOperation):
        if isinstance(expr.operator, (cst.Divide, cst.Multiply)):
            right = _arithmetic_names(expr.right)
            left = _arithmetic_names(expr.left)
            divisor = right if isinstance(expr.operator, cst.Divide) else right | left
            inner = loss_kind(facts, expr.left, scope, before, depth + 1)
            if is_global_batch(facts, divisor, scope):
                return Loss(_scaled(inner), expr, None)
            return inner if inner is not None and inner.kind == "scaled" else None
        if isinstance(expr.operator, (cst.Add, cst.Subtract)):
            parts = [loss_kind(facts, side, scope, before, depth + 1) for side in (expr.left, expr.right)]
            return _combine(parts)
        return None
    name = dotted(expr)
    if name is None:
        return None
    found = [a for a in definitions(facts, name, scope, before) if a.scope is scope]
    if not found:
        return None
    state: Loss | None = None
    for assign in found:
        if assign.operator == "=":
            inner = loss_kind(facts, assign.value, scope, assign.order, depth + 1)
            state = Loss(inner.kind, inner.node, inner.statement or assign.statement) if inner else None
        elif assign.operator in ("DivideAssign", "MultiplyAssign") and is_global_batch(facts, assign.names, scope):
            state = Loss(_scaled(state), assign.node, assign.statement)
        elif assign.operator in ("AddAssign", "SubtractAssign"):
            state = _combine([state, loss_kind(facts, assign.value, scope, assign.order, depth + 1)])
        else:
            state = None
    return state


def differentiated_losses(facts: ModuleFacts) -> Iterator[tuple[CallFact, Loss]]:
    """(gradient call, loss) for every `tape.gradient(loss, ...)`/`optimizer.minimize(loss, ...)` in a replica
    function whose loss scaling the module shows."""
    for replica in facts.replica_functions:
        for call in replica.calls:
            if call.attr not in ("gradient", "minimize"):
                continue
            target = call_arg(call.node, 0, "target" if call.attr == "gradient" else "loss")
            loss = loss_kind(facts, target, replica, call.order)
            if loss is not None:
                yield call, loss


def _scaled(inner: Loss | None) -> LossKind:
    """A loss divided by the global batch or replica count: scaled, unless it was a default-reduction Keras
    loss, which Keras >= 3.8 has already divided by the replica count."""
    return "keras-default-scaled" if inner is not None and inner.kind == "keras-default" else "scaled"


def _arithmetic_names(expr: cst.BaseExpression) -> frozenset[str]:
    """Names in a short arithmetic expression such as a divisor (`(B * strategy.num_replicas_in_sync)`).
    Bounded to operators, calls and name chains: this is not a walk of the module."""
    name = dotted(expr)
    if name is not None:
        return frozenset({name})
    if isinstance(expr, cst.BinaryOperation):
        return _arithmetic_names(expr.left) | _arithmetic_names(expr.right)
    if isinstance(expr, cst.UnaryOperation):
        return _arithmetic_names(expr.expression)
    if isinstance(expr, cst.Call):
        return _arithmetic_names(expr.func).union(*(_arithmetic_names(a.value) for a in expr.args))
    if isinstance(expr, cst.Subscript):
        return _arithmetic_names(expr.value)
    return frozenset()


def _combine(parts: list[Loss | None]) -> Loss | None:
    known = [p for p in parts if p is not None]
    if not known or len(known) != len(parts):
        return None
    for kind in ("mean", "sum", "keras-default"):
        for part in known:
            if part.kind == kind:
                return part
    return known[0]


def keras_loss_reduction(facts: ModuleFacts, func: cst.BaseExpression, scope: Scope) -> str | None:
    """For a call through a Keras loss object (`loss_fn(y, p)`), its reduction (default 'sum_over_batch_size')."""
    name = dotted(func)
    if name is None:
        return None
    constructor: cst.BaseExpression | None = None
    direct = facts.resolve(name)
    if direct is None:
        found = definitions(facts, name, scope)
        if not found or not isinstance(found[-1].value, cst.Call):
            return None
        constructor = found[-1].value
    if not isinstance(constructor, cst.Call):
        return None
    resolved = facts.resolve(constructor.func) or ""
    if not resolved.startswith("keras.losses.") or not resolved.split(".")[-1][:1].isupper():
        return None
    reduction = call_arg(constructor, None, "reduction")
    if reduction is None:
        return "sum_over_batch_size"
    text = literal_str(reduction)
    if text is not None:
        return text
    attr = dotted(reduction) or ""
    return attr.split(".")[-1] if attr else None


# -- training steps, loops and inputs ---------------------------------------------------------------------
def _step_calls(facts: ModuleFacts) -> list[CallFact]:
    return [*facts.run_calls, *(c for c in facts.calls if c.attr in TRAINING_ATTRS)]


def training_step_scopes(facts: ModuleFacts) -> list[Scope]:
    """Functions that run one training step: they call `strategy.run`, apply gradients or `train_on_batch`
    outside any loop of their own, directly or through such a function. A function that loops over steps
    is a training loop, not a step."""
    cached = facts.__dict__.get("_training_steps")
    if cached is not None:
        return cached
    steps = {id(c.scope): c.scope for c in _step_calls(facts) if c.scope.is_function and not c.loops}
    changed = True
    while changed:
        changed = False
        for call in facts.calls:
            target = facts.callee(call)
            if (target is not None and id(target) in steps and id(call.scope) not in steps
                    and call.scope.is_function and not call.loops):
                steps[id(call.scope)] = call.scope
                changed = True
    facts.__dict__["_training_steps"] = list(steps.values())
    return facts.__dict__["_training_steps"]


def calls_training_step(facts: ModuleFacts, call: CallFact) -> bool:
    if call.attr in TRAINING_ATTRS or any(call is run for run in facts.run_calls):
        return True
    target = facts.callee(call)
    return target is not None and any(target is s for s in training_step_scopes(facts))


def training_loops(facts: ModuleFacts) -> list[LoopFact]:
    """`for`/`while` loops whose body (not a nested loop's) runs a training step."""
    cached = facts.__dict__.get("_training_loops")
    if cached is None:
        cached = [
            loop for loop in facts.loops
            if any(c.loops and c.loops[-1] is loop and calls_training_step(facts, c) for c in loop.calls)
        ]
        facts.__dict__["_training_loops"] = cached
    return cached


def gated_by_step_modulo(call: CallFact) -> bool:
    """Whether a call runs only every N steps: under `if step % N == 0` (or any `if` testing a modulo)."""
    return any(_has_modulo(branch.test) for branch in call.ifs)


def _has_modulo(test: cst.BaseExpression) -> bool:
    if isinstance(test, cst.Comparison):
        return _has_modulo(test.left)
    if isinstance(test, cst.UnaryOperation):
        return _has_modulo(test.expression)
    if isinstance(test, cst.BooleanOperation):
        return _has_modulo(test.left) or _has_modulo(test.right)
    return isinstance(test, cst.BinaryOperation) and isinstance(test.operator, cst.Modulo)


@dataclass(frozen=True)
class TrainingInput:
    """An expression whose batches reach training, and how: `fit`, `distribute` (experimental_distribute_dataset),
    `distribute_fn` (returned by a distribute_datasets_from_function function), `loop` or `next`."""

    scope: Scope
    order: int
    expr: cst.BaseExpression
    statement: cst.CSTNode
    via: str


_NOT_TRAINING = re.compile(r"val|eval|test", re.IGNORECASE)
_PASS_THROUGH = frozenset({"iter", "enumerate", "tqdm"})


def training_inputs(facts: ModuleFacts) -> list[TrainingInput]:
    cached = facts.__dict__.get("_training_inputs")
    if cached is not None:
        return cached
    found: list[TrainingInput] = []
    for call in facts.method_calls("fit", "fit_generator"):
        x = call_arg(call.node, 0, "x" if call.attr == "fit" else "generator")
        if x is not None:
            found.append(TrainingInput(call.scope, call.order, x, call.statement, "fit"))
    for call in facts.calls:
        if call.attr not in DISTRIBUTE_DATASET_METHODS or not facts.is_strategy(call.receiver):
            continue
        targets = next((a.targets for a in facts.assigns if a.value is call.node), ())
        if any(_NOT_TRAINING.search(t) for t in targets):
            continue
        if call.attr == "experimental_distribute_dataset":
            dataset = call_arg(call.node, 0, "dataset")
            if dataset is not None:
                found.append(TrainingInput(call.scope, call.order, dataset, call.statement, "distribute"))
        else:
            for fn in facts.callables_of(call_arg(call.node, 0, "dataset_fn"), call.scope):
                found.extend(TrainingInput(fn, END_OF_SCOPE, r.value, call.statement, "distribute_fn")
                             for r in fn.returns)
    for loop in training_loops(facts):
        if loop.iter_expr is not None:
            found.append(TrainingInput(loop.scope, loop.order, _unwrap(facts, loop.iter_expr, loop.scope, loop.order),
                                       loop.node, "loop"))
        for call in loop.calls:
            if call.func == "next" and call.loops[-1] is loop:
                iterator = call_arg(call.node, 0, None)
                if iterator is not None:
                    found.append(TrainingInput(call.scope, call.order, _unwrap(facts, iterator, call.scope, call.order),
                                               call.statement, "next"))
    facts.__dict__["_training_inputs"] = found
    return found


def _unwrap(facts: ModuleFacts, expr: cst.BaseExpression, scope: Scope, before: int) -> cst.BaseExpression:
    """`enumerate(ds)`, `iter(ds)`, `tqdm(ds)`, or a name bound to one of them -> `ds`."""
    for _ in range(4):
        if isinstance(expr, cst.Call) and (dotted(expr.func) or "").split(".")[-1] in _PASS_THROUGH and expr.args:
            expr = expr.args[0].value
            continue
        name = dotted(expr)
        found = definitions(facts, name, scope, before) if name else []
        value = found[-1].value if found else None
        if isinstance(value, cst.Call) and (dotted(value.func) or "").split(".")[-1] in _PASS_THROUGH:
            expr = value
            continue
        return expr
    return expr


def training_chains(facts: ModuleFacts) -> list[tuple[DatasetChain, TrainingInput]]:
    """`tf.data` pipelines that feed training (evaluation and prediction pipelines are not among them)."""
    cached = facts.__dict__.get("_training_chains")
    if cached is None:
        cached = []
        for use in training_inputs(facts):
            chain = facts.dataset_chain(use.expr, use.scope, use.order)
            if chain is not None:
                cached.append((chain, use))
        facts.__dict__["_training_chains"] = cached
    return cached
