"""How a differentiated loss is reduced: a per-replica mean, an unscaled sum, scaled by the global batch, or
a Keras loss object with its default reduction; and whether a size is the global batch.

A loss is followed through the semantic model's lookup: names (the assignments of its scope, folded in
order for `loss /= GLOBAL_BATCH`), helpers that return it (in this module or another project module),
`self.loss_fn` set in any method, lists of losses summed by `tf.add_n`/`sum`, the losses Keras computes
(`self.compiled_loss`, `self.compute_loss`) and a model whose own `call` returns the loss.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Iterator, Literal

import libcst as cst

from tfdoctor.lint.analysis.evidence import Evidence, evidence_for
from tfdoctor.lint.analysis.tensorflow import ModuleFacts
from tfdoctor.lint.names import call_arg, dotted, literal_int, literal_str
from tfdoctor.lint.semantic.collector import AssignFact, CallFact, LoopFact, Scope, reads
from tfdoctor.lint.semantic.model import Origin

REPLICA_COUNT = re.compile(r"num_replicas_in_sync|get_per_replica_batch_size|num_replicas", re.IGNORECASE)
_GLOBAL_WORD = re.compile(r"global|num_replicas_in_sync", re.IGNORECASE)
_BATCH_WORD = re.compile(r"batch", re.IGNORECASE)
_PER_REPLICA_WORD = re.compile(r"per_replica|replica_batch|local_batch", re.IGNORECASE)
LossKind = Literal["mean", "sum", "scaled", "keras-default", "keras-default-scaled"]
_MEAN = frozenset({"tensorflow.reduce_mean", "tensorflow.math.reduce_mean", "keras.ops.mean", "keras.backend.mean"})
_SUM = frozenset({"tensorflow.reduce_sum", "tensorflow.math.reduce_sum", "keras.ops.sum", "keras.backend.sum"})
_SCALED = frozenset({"tensorflow.nn.compute_average_loss", "tensorflow.nn.scale_regularization_loss"})
_ADD_N = frozenset({"tensorflow.add_n", "tensorflow.math.add_n"})
_KERAS_SCALED_ATTRS = frozenset({"self.compiled_loss", "self.compute_loss"})
_DEFAULT_REDUCTIONS = frozenset({"sum_over_batch_size", "auto", "SUM_OVER_BATCH_SIZE", "AUTO"})
_MAX_DEPTH = 8


def mentions_replica_count(facts: ModuleFacts, names: frozenset[str], scope: Scope, depth: int = 0) -> bool:
    """Whether an expression's names come from `num_replicas_in_sync`/`get_per_replica_batch_size`."""
    if any(REPLICA_COUNT.search(name) for name in names):
        return True
    if depth > 3:
        return False
    return facts.memo(("mentions_replica_count", names, id(scope), depth), lambda: any(
        mentions_replica_count(facts, a.names, a.scope, depth + 1)
        for name in names if "." not in name or name.startswith("self.")
        for a in facts.definitions(name, scope)
    ))


def is_global_batch(facts: ModuleFacts, names: frozenset[str], scope: Scope, depth: int = 0) -> bool:
    """Whether a divisor is the global batch: named so, or computed from the replica count, directly or
    through its assignments (`self.batch_size = global_batch_size`)."""
    if any(_GLOBAL_WORD.search(name) for name in names) or mentions_replica_count(facts, names, scope):
        return True
    return depth < 2 and any(
        is_global_batch(facts, a.names, a.scope, depth + 1)
        for name in names if "." not in name or name.startswith("self.")
        for a in facts.definitions(name, scope)
    )


@dataclass(frozen=True)
class Loss:
    kind: LossKind
    node: cst.CSTNode  # the expression that makes it so (for the finding's position), in the linted module
    statement: cst.CSTNode | None
    evidence: tuple[Evidence, ...] = ()  # where it lies when that is in another module


def loss_kind(facts: ModuleFacts, expr: cst.BaseExpression | None, scope: Scope, before: int,
              depth: int = 0) -> Loss | None:
    """How a scalar loss is reduced, or None when the code does not show it."""
    if expr is None or depth > _MAX_DEPTH:
        return None
    facts = scope.owner  # type: ignore[assignment]
    if isinstance(expr, cst.Call):
        return _call_loss(facts, expr, scope, before, depth)
    if isinstance(expr, cst.BinaryOperation):
        if isinstance(expr.operator, (cst.Divide, cst.Multiply)):
            right = _arithmetic_names(expr.right)
            left = _arithmetic_names(expr.left)
            divisor = right if isinstance(expr.operator, cst.Divide) else right | left
            weighted = isinstance(expr.operator, cst.Multiply) and _weight(facts, expr.left, scope)
            loss_side = expr.right if weighted else expr.left  # `LAMBDA * loss`
            inner = loss_kind(facts, loss_side, scope, before, depth + 1)
            if is_global_batch(facts, divisor, scope):
                return Loss(_scaled(inner), expr, None)
            if isinstance(expr.operator, cst.Divide) and inner is not None and inner.kind == "sum" \
                    and _local_count(facts, expr.right):
                return Loss("mean", expr, None)  # `reduce_sum(loss * mask) / reduce_sum(mask)`: this replica's mean
            if isinstance(expr.operator, cst.Divide) and inner is not None and inner.kind == "sum" \
                    and any(_BATCH_WORD.search(name) for name in divisor):
                # `reduce_sum(...) / BATCH_SIZE`: the replica's mean when that is its own batch, scaled when the
                # strategy splits a batch of that size; named per replica, it is the first
                return Loss("mean", expr, None) if any(_PER_REPLICA_WORD.search(n) for n in divisor) else None
            if inner is not None and (inner.kind == "scaled" or weighted or _weight(facts, expr.right, scope)):
                return inner  # a constant weight keeps the reduction (`10.0 * tf.reduce_mean(...)`)
            return None
        if isinstance(expr.operator, (cst.Add, cst.Subtract)):
            parts = [loss_kind(facts, side, scope, before, depth + 1) for side in (expr.left, expr.right)]
            return _combine(parts)
        return None
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, (cst.Minus, cst.Plus)):
        return loss_kind(facts, expr.expression, scope, before, depth + 1)  # a GAN's `-tf.reduce_mean(fake)`
    if isinstance(expr, cst.Subscript):  # `outputs[0]`
        return _through_lookup(facts, expr, scope, before, depth)
    name = dotted(expr)
    if name is None:
        return None
    found = [a for a in facts.definitions(name, scope, before) if a.scope is scope]
    if not found:
        return _through_lookup(facts, expr, scope, before, depth)
    state: Loss | None = None
    zero = False  # `loss = 0.` before `loss += ...` in a loop: the first term is the whole loss
    for assign in found:
        if assign.operator == "=":
            zero = _is_zero(assign.value)
            inner = None if zero else _assigned_loss(facts, assign.value, name, assign, depth)
            state = replace(inner, statement=inner.statement or assign.statement) if inner else None
        elif assign.operator in ("DivideAssign", "MultiplyAssign") and is_global_batch(facts, assign.names, scope):
            state, zero = Loss(_scaled(state), assign.node, assign.statement), False
        elif assign.operator in ("AddAssign", "SubtractAssign"):
            term = loss_kind(facts, assign.value, scope, assign.order, depth + 1)
            state, zero = (term if zero else _combine([state, term])), False
        else:
            state, zero = None, False
    return state


_COUNTS = frozenset({"tensorflow.reduce_sum", "tensorflow.math.reduce_sum", "tensorflow.math.count_nonzero",
                     "tensorflow.count_nonzero", "tensorflow.size"})


def _local_count(facts: ModuleFacts, expr: cst.BaseExpression) -> bool:
    """A count the step makes from its own batch (`tf.reduce_sum(mask)`, `tf.size(labels)`, also cast to a float):
    dividing a sum by it gives this replica's mean."""
    while isinstance(expr, cst.Call) and facts.resolve(expr.func) in ("tensorflow.cast", "tensorflow.dtypes.cast") \
            and expr.args:
        expr = expr.args[0].value
    return isinstance(expr, cst.Call) and facts.resolve(expr.func) in _COUNTS


def _weight(facts: ModuleFacts, expr: cst.BaseExpression, scope: Scope) -> bool:
    """A number written out, or a name every assignment of which is one (`LAMBDA = 10`)."""
    if isinstance(expr, cst.UnaryOperation):
        expr = expr.expression
    if isinstance(expr, (cst.Integer, cst.Float)):
        return True
    name = dotted(expr)
    found = facts.definitions(name, scope) if name is not None and "." not in name else []
    return bool(found) and all(
        a.operator == "=" and not a.path_of(name) and isinstance(a.value, (cst.Integer, cst.Float)) for a in found)


def _is_zero(expr: cst.BaseExpression) -> bool:
    return isinstance(expr, (cst.Integer, cst.Float)) and float(expr.value.replace("_", "")) == 0


def _assigned_loss(facts: ModuleFacts, value: cst.BaseExpression, name: str, assign, depth: int) -> Loss | None:
    if assign.path_of(name):  # unpacked from a tuple: what the lookup finds at that position
        return _from_origins(facts, facts.values_of(value, assign.scope, assign.order, assign.path_of(name)),
                             value, depth)
    return loss_kind(facts, value, assign.scope, assign.order, depth + 1)


def _call_loss(facts: ModuleFacts, expr: cst.Call, scope: Scope, before: int, depth: int) -> Loss | None:
    resolved = facts.resolve(expr.func)
    if resolved in _MEAN:
        return Loss("mean", expr, None)
    if resolved in _SUM:
        return Loss("sum", expr, None)
    if resolved in _SCALED:
        return Loss("scaled", expr, None)
    if resolved in _ADD_N or (dotted(expr.func) == "sum" and "sum" not in facts.aliases):
        return _summed_items(facts, call_arg(expr, 0, "inputs"), expr, scope, before, depth)
    func_name = dotted(expr.func)
    if func_name in _KERAS_SCALED_ATTRS and in_keras_model(facts, scope):
        return Loss("scaled", expr, None)  # Keras divides its compiled losses by the replica count
    reduction = keras_loss_reduction(facts, expr.func, scope)
    if reduction in _DEFAULT_REDUCTIONS:
        return Loss("keras-default", expr, None)
    if reduction in ("none", "NONE"):
        return Loss("sum", expr, None)  # per-example losses: their gradient is the gradient of their sum
    if reduction is not None or (resolved is not None and facts.foreign(dotted(expr.func) or "") is None):
        return None
    returned = _model_call_loss(facts, expr, scope, depth)
    if returned is not None:
        return returned
    return _through_lookup(facts, expr, scope, before, depth)


def _through_lookup(facts: ModuleFacts, expr: cst.BaseExpression, scope: Scope, before: int,
                    depth: int) -> Loss | None:
    """A helper's return value, a parameter's arguments, a module global: whatever the lookup finds."""
    origins = [o for o in facts.values_of(expr, scope, before) if o.expr is not expr]
    return _from_origins(facts, origins, expr, depth)


def _from_origins(facts: ModuleFacts, origins: list[Origin], anchor: cst.CSTNode, depth: int) -> Loss | None:
    """One kind when every origin agrees; placed on `anchor` when it lies in another module."""
    if not origins or any(o.kind != "value" for o in origins):
        return None
    if any(o.path for o in origins):  # `loss, acc = model(x)`: an item of what a model's `call` returns
        only = origins[0]
        if len(origins) != 1 or not isinstance(only.expr, cst.Call) or only.model is not facts:
            return None
        return _model_call_loss(facts, only.expr, only.scope, depth, only.path)  # type: ignore[arg-type]
    losses = [loss_kind(o.model, o.expr, o.scope, o.order, depth + 1) for o in origins]  # type: ignore[arg-type]
    if any(loss is None for loss in losses) or len({loss.kind for loss in losses}) != 1:  # type: ignore[union-attr]
        return None
    loss, origin = losses[0], origins[0]
    assert loss is not None
    elsewhere = bool(origin.via) and origin.model is not facts
    evidence = (*evidence_for(origin.via, "loss", origin.model, loss.node), *loss.evidence) if elsewhere \
        else loss.evidence
    if isinstance(anchor, cst.Call) and origin.scope is not _scope_of_call(facts, anchor):
        call = facts.call_fact(anchor)  # a helper's return value: reported where the replica function calls it
        return Loss(loss.kind, anchor, call.statement if call else None, evidence)
    if elsewhere:
        step = origin.via[0]
        call = facts.call_fact(step.call)
        return Loss(loss.kind, step.call, call.statement if call else None, evidence)
    return loss


def _scope_of_call(facts: ModuleFacts, node: cst.Call) -> Scope | None:
    call = facts.call_fact(node)
    return call.scope if call is not None else None


def _summed_items(facts: ModuleFacts, items: cst.BaseExpression | None, expr: cst.Call, scope: Scope, before: int,
                  depth: int) -> Loss | None:
    """`tf.add_n(losses)` / `sum(losses)`: the losses of a list literal, or appended to a list."""
    if items is None:
        return None
    if isinstance(items, (cst.List, cst.Tuple)):
        parts = [loss_kind(facts, e.value, scope, before, depth + 1) for e in items.elements]
    else:
        name = dotted(items)
        if name is None:
            return None
        parts = [loss_kind(o.model, o.expr, o.scope, o.order, depth + 1)  # type: ignore[arg-type]
                 for o in facts.items_of(name, scope, before)]
    combined = _combine(parts) if parts else None
    return replace(combined, node=expr) if combined is not None and combined.node not in _nodes(parts) else combined


def _nodes(parts: list[Loss | None]) -> list[cst.CSTNode]:
    return [p.node for p in parts if p is not None]


def in_keras_model(facts: ModuleFacts, scope: Scope) -> bool:
    """Whether a scope is a method of a class derived from a Keras `Model`."""
    class_name = facts.enclosing_class(scope)
    class_fact = facts.class_named(class_name) if class_name else None
    return class_fact is not None and any(
        (facts.resolve(base) or base).split(".")[-1] == "Model" for base in class_fact.bases
    )


def _model_call_loss(facts: ModuleFacts, expr: cst.Call, scope: Scope, depth: int,
                     path: tuple[int, ...] = ()) -> Loss | None:
    """`model(x)` where `model` is an instance of a project class whose `call` returns the loss, or with
    `path`, returns a tuple whose item there is the loss (`return loss, accuracy`)."""
    for origin in facts.values_of(expr.func, scope):
        value = origin.expr
        if origin.kind != "value" or not isinstance(value, cst.Call):
            continue
        model: ModuleFacts = origin.model  # type: ignore[assignment]
        class_fact = model.class_of(dotted(value.func))
        method = class_fact.methods.get("call") if class_fact is not None else None
        if method is None or len(method.returns) != 1:
            continue
        owner: ModuleFacts = method.owner  # type: ignore[assignment]
        returned = _item(method.returns[0].value, path)
        loss = loss_kind(owner, returned, method, 1 << 62, depth + 1) if returned is not None else None
        if loss is None:
            return None
        call = facts.call_fact(expr)
        evidence = (Evidence(f"loss from `{class_fact.name}.call`", owner.path, owner, loss.node),) \
            if owner is not facts else ()
        return Loss(loss.kind, expr, call.statement if call else None, (*evidence, *loss.evidence))
    return None


def _item(value: cst.BaseExpression, path: tuple[int, ...]) -> cst.BaseExpression | None:
    """The element of a tuple or list literal at `path` (the value itself for no path)."""
    for index in path:
        if not isinstance(value, (cst.Tuple, cst.List)) or not 0 <= index < len(value.elements) or any(
                isinstance(e, cst.StarredElement) for e in value.elements[:index + 1]):
            return None
        value = value.elements[index].value
    return value


def differentiated_losses(facts: ModuleFacts) -> Iterator[tuple[CallFact, Loss]]:
    """(gradient call, loss) for every `tape.gradient(loss, ...)`/`optimizer.minimize(loss, ...)` in a replica
    function whose loss scaling the code shows."""
    for replica in facts.replica_functions:
        for call in replica.calls:
            if call.attr not in ("gradient", "minimize"):
                continue
            if call.attr == "gradient" and _of_watched_input(call, replica):
                continue  # a gradient penalty's `gradient(logits, images)`: no weight is updated with it
            target = call_arg(call.node, 0, "target" if call.attr == "gradient" else "loss")
            loss = loss_kind(facts, target, replica, call.order)
            if loss is not None:
                yield call, loss


def _of_watched_input(call: CallFact, scope: Scope) -> bool:
    """`tape.gradient(y, x)` after `tape.watch(x)`: a gradient with respect to a tensor, not to variables."""
    sources = dotted(call_arg(call.node, 1, "sources"))
    return sources is not None and any(
        c.attr == "watch" and dotted(call_arg(c.node, 0, "tensor")) == sources for c in scope.calls)


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
        found = facts.definitions(name, scope)
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


# What differentiates a loss: the method (or function) and where its loss argument sits.
_DIFFERENTIATE = {"gradient": (0, "target"), "minimize": (0, "loss"), "compute_gradients": (0, "loss")}
_UPDATES = frozenset({"gradient", "gradients", "minimize", "compute_gradients", "apply_gradients"})


@dataclass(frozen=True)
class OneOfList:
    """A gradient call that differentiates one loss of a list built in a loop: the list and what is given."""

    call: CallFact
    list_name: str
    given: cst.BaseExpression


def one_loss_of_list(facts: ModuleFacts) -> Iterator[OneOfList]:
    """Gradient calls (`tape.gradient`, `minimize`, `compute_gradients`, `tf.gradients`) given, after a loop that
    appends one loss per turn to a list, only one of them: the loop's last loss (`step_loss`, bound in the loop
    and appended) or one item (`losses[-1]`). A loop that updates weights itself trains each loss there."""
    for call in facts.calls:
        target = _differentiated(facts, call)
        if target is None:
            continue
        found = _last_of_loop(facts, call, target) or _item_of_list(facts, call, target)
        if found is not None:
            yield OneOfList(call, found, target)


def _differentiated(facts: ModuleFacts, call: CallFact) -> cst.BaseExpression | None:
    if call.attr in _DIFFERENTIATE:
        return call_arg(call.node, *_DIFFERENTIATE[call.attr])
    if facts.resolve(call.node.func) == "tensorflow.gradients":
        return call_arg(call.node, 0, "ys")
    return None


def _last_of_loop(facts: ModuleFacts, call: CallFact, target: cst.BaseExpression) -> str | None:
    """`step_loss` after `for ...: step_loss = ...; losses.append(step_loss)`, also through assignments after the
    loop that read it and not the list (`step_loss = tf.reduce_sum(step_loss)`): the list's name."""
    return _last_loss_list(facts, call, target.value, call.order, 0) if isinstance(target, cst.Name) else None


def _last_loss_list(facts: ModuleFacts, call: CallFact, name: str, before: int, depth: int) -> str | None:
    origins = facts.values_of(cst.Name(name), call.scope, before)
    assigns = [next((a for a in call.scope.assigns if a.value is o.expr and name in a.targets), None)
               for o in origins if o.kind == "value" and o.scope is call.scope]
    if not assigns or len(assigns) != len(origins) or not all(assigns) or depth > 3:
        return None
    found = {_appended_in_loop(call, a) or _derived_from_last(facts, call, a, depth)  # type: ignore[arg-type]
             for a in assigns}
    return found.pop() if len(found) == 1 else None


def _derived_from_last(facts: ModuleFacts, call: CallFact, assign: AssignFact, depth: int) -> str | None:
    """An assignment outside the loops the call comes after, computed from one loop's last loss and not from
    its list (`tloss = tf.reduce_sum(tloss)`)."""
    if any(loop not in call.loops for loop in assign.loops):
        return None
    found = {_last_loss_list(facts, call, n, assign.order, depth + 1) for n in assign.names
             if "." not in n and facts.resolve(n) is None}
    found.discard(None)
    if len(found) != 1:
        return None
    list_name = found.pop()
    return None if list_name is None or reads(assign.names, list_name) else list_name


def _appended_in_loop(call: CallFact, assign: AssignFact) -> str | None:
    """The list a fresh per-turn value (`v = ...`, not `v += ...`) is appended to in a loop the call comes after."""
    name = assign.targets[0] if len(assign.targets) == 1 else None
    if name is None or assign.operator != "=" or name in assign.names:
        return None
    for loop in assign.loops:
        if loop in call.loops or not isinstance(loop.node, cst.For) or _updates_weights(loop):
            continue
        for append in loop.calls:
            if (append.attr == "append" and append.order > assign.order and isinstance(append.receiver, cst.Name)
                    and dotted(call_arg(append.node, 0, None)) == name):
                return append.receiver.value
    return None


def _item_of_list(facts: ModuleFacts, call: CallFact, target: cst.BaseExpression) -> str | None:
    """`losses[-1]` (or a name bound to it) where `losses` is a list of losses appended in an earlier loop."""
    # The one assignment of the name before the call, as written: `values_of` follows `losses[0]` on into
    # what the list holds, and the question here is the subscript itself.
    bound = [a for a in call.scope.assigns if isinstance(target, cst.Name) and tuple(a.targets) == (target.value,)
             and a.order < call.order]
    item = bound[0].value if len(bound) == 1 else target
    if not (isinstance(item, cst.Subscript) and isinstance(item.value, cst.Name) and len(item.slice) == 1
            and isinstance(item.slice[0].slice, cst.Index) and literal_int(item.slice[0].slice.value) is not None):
        return None
    name = item.value.value
    for loop in call.scope.loops:
        if (loop in call.loops or loop.order > call.order or not isinstance(loop.node, cst.For)
                or _updates_weights(loop)):
            continue
        if any(c.attr == "append" and dotted(c.receiver) == name and loop in c.loops for c in loop.calls) \
                and facts.items_of(name, call.scope, call.order):
            return name
    return None


def _updates_weights(loop: LoopFact) -> bool:
    return any(c.attr in _UPDATES for c in loop.calls)
