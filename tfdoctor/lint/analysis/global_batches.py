"""Batches that a strategy splits among its replicas although their size does not grow with the replica count:
`Dataset.batch(B)` in a pipeline given to `strategy.experimental_distribute_dataset` or to `fit` under a strategy
(here, or in a module that imports this one and trains on it), with `B` a number or a configured value that
nothing scales, and nothing showing it is the global batch on purpose (divided by, given as
`global_batch_size=`, a learning rate computed from it). TFD106 reports those the code shows to be meant per
replica; the opt-in TFD114 the others."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Iterator

import libcst as cst
import libcst.matchers as m

from tfdoctor.lint.analysis.inputs import TrainingInput, fed_elsewhere, training_inputs
from tfdoctor.lint.analysis.losses import REPLICA_COUNT, is_global_batch, mentions_replica_count
from tfdoctor.lint.analysis.multiworker import only_multi_worker, only_one_device
from tfdoctor.lint.analysis.tensorflow import DatasetChain, DatasetOp, ModuleFacts
from tfdoctor.lint.findings import Evidence
from tfdoctor.lint.names import call_arg, dotted, literal_int, literal_str, string_key
from tfdoctor.lint.semantic.collector import END_OF_SCOPE, Scope, reads
from tfdoctor.lint.semantic.model import Origin


@dataclass(frozen=True)
class UnscaledBatch:
    """A `batch(B)` a strategy splits, B not scaled by the replica count: where to report it, and how."""

    node: cst.CSTNode  # the `batch` attribute, or the call in this module that brings in another's pipeline
    statement: cst.CSTNode | None
    method: str  # `batch`, `padded_batch`, ...
    size: str  # B as written
    evidence: tuple[Evidence, ...]  # where the strategy takes it, when that is in another module
    per_replica: bool  # the code shows B is meant per replica (its name, or a product with the replica count)


def unscaled_batches(facts: ModuleFacts) -> list[UnscaledBatch]:
    """The module's unscaled batches a strategy splits (asked by two rules: found once)."""
    return facts.memo(("unscaled_batches",), lambda: list(_unscaled_batches(facts)))


def _unscaled_batches(facts: ModuleFacts) -> Iterator[UnscaledBatch]:
    if only_one_device(facts):
        return  # one device has one replica, so there is nothing to scale by
    multi_worker = only_multi_worker(facts)
    seen: set[int] = set()
    for use in _strategy_feeds(facts):  # a strategy splits datasets only: any source has `batch`
        chain = facts.dataset_chain(use.expr, use.scope, use.order, any_source=True)
        if chain is None:
            continue
        site = _batch_site(chain)
        if site is None or id(site[0]) in seen:
            continue
        batch_call, size, op, scope = site
        seen.add(id(batch_call))
        if (size is not None and _unscaled(facts, size, scope)
                and all(_batches_unscaled(alternative) for alternative in chain.alternatives)
                and not (multi_worker and not _multiplied(size, scope.owner, facts))):  # type: ignore[arg-type]
            target = batch_call.func.attr if isinstance(batch_call.func, cst.Attribute) else batch_call.func
            placed = chain.place(target, op)
            if placed is None:
                continue
            node, evidence = placed
            statement = facts.call_fact(node if evidence else batch_call)
            yield UnscaledBatch(node, statement.statement if statement else None, _method(batch_call), _text(size),
                                evidence, meant_per_replica(size, scope.owner, facts))  # type: ignore[arg-type]
    batching_calls = facts.method_calls("batch", "padded_batch", "ragged_batch", "apply")
    if not any(id(c.node) not in seen for c in batching_calls):
        return  # asking the importers costs their analysis: only for a batch it has not reported
    for feed in fed_elsewhere(facts):  # a loader's pipeline that another module's strategy splits
        batch = feed.final_batch
        consumer: ModuleFacts = feed.use.scope.owner  # type: ignore[assignment]
        if (batch is None or batch.scope is None or id(batch.call) in seen or not feed.use.distributed
                or feed.use.via not in ("distribute", "fit")):
            continue
        size = call_arg(batch.batching_call, 0, "batch_size")  # type: ignore[arg-type]
        if only_multi_worker(consumer) and not (size is not None and _multiplied(size, facts, consumer)):
            continue
        seen.add(id(batch.call))
        batching: cst.Call = batch.batching_call  # type: ignore[assignment]
        name = dotted(size)
        if (size is not None and _unscaled(facts, size, batch.scope)
                and not (name is not None and "." in name and _treated_as_global(consumer, name))):
            call = facts.call_fact(batching)
            target = batching.func.attr if isinstance(batching.func, cst.Attribute) else batching.func
            yield UnscaledBatch(target, call.statement if call else None, _method(batching), _text(size),
                                (feed.evidence,), meant_per_replica(size, facts, consumer))


_PER_REPLICA_WORD = re.compile(r"per_?(replica|gpu|device|core|tower|worker)|(replica|gpu|device|core|tower)_batch",
                               re.IGNORECASE)


def meant_per_replica(size: cst.BaseExpression, *modules: ModuleFacts) -> bool:
    """Whether the code shows a batch size is meant per replica: its name says so (`BATCH_SIZE_PER_REPLICA`,
    `per_gpu_batch`, `cfg["batch_per_core"]`), or one of the modules multiplies it (the same name, last part, or
    number) by the replica count (`GLOBAL_BATCH = hp.batch_size * strategy.num_replicas_in_sync`)."""
    key = _factor_key(size)
    if key is None:
        return False
    if isinstance(key, str) and _PER_REPLICA_WORD.search(key):
        return True
    return _multiplied(size, *modules)


def _multiplied(size: cst.BaseExpression, *modules: ModuleFacts) -> bool:
    """Whether one of the modules multiplies the batch size (the same name, last part, or number) by the
    replica count. Under a multi-worker strategy, where the batch given to `fit` is by convention the global
    batch of the cluster, only this shows that a batch size is meant per replica."""
    key = _factor_key(size)
    return key is not None and any(key in _replica_factors(facts) for facts in modules)


def _replica_factors(facts: ModuleFacts) -> frozenset[str | int]:
    """What the module multiplies by the replica count, as `_factor_key` spells it."""
    def factors() -> frozenset[str | int]:
        found: set[str | int] = set()
        for product in facts.products:
            for side, other in ((product.left, product.right), (product.right, product.left)):
                key = _factor_key(side)
                if key is not None and any(isinstance(name, cst.Name) and REPLICA_COUNT.search(name.value)
                                           for name in m.findall(other, m.Name())):
                    found.add(key)
        return frozenset(found)
    return facts.memo(("replica_factors",), factors)


def _factor_key(size: cst.BaseExpression) -> str | int | None:
    """A batch size as the modules are compared on: a number, the last part of a name, or a string key."""
    number = literal_int(size)
    if number is not None:
        return number
    if isinstance(size, cst.Subscript):
        key = literal_str(size.slice[0].slice.value) if isinstance(size.slice[0].slice, cst.Index) else None
        return key.lower() if key else None
    name = dotted(size)
    return name.rpartition(".")[2].lower() if name else None


def _strategy_feeds(facts: ModuleFacts) -> Iterator[TrainingInput]:
    """Every training input a strategy splits: given to `experimental_distribute_dataset` (not for
    evaluation or inference) or to `fit` under a strategy."""
    return (use for use in training_inputs(facts) if use.distributed and use.via in ("distribute", "fit"))


_LEARNING_RATE = re.compile(r"(^|_)(lr|learning_rate)$", re.IGNORECASE)


def _unscaled(facts: ModuleFacts, size: cst.BaseExpression | None, scope: Scope, depth: int = 0) -> bool:
    """Whether a batch size is surely per-replica: a literal or a configured value that nothing scales."""
    facts = scope.owner  # type: ignore[assignment]  # the batch's module, which may be another
    if literal_int(size) is not None:
        return True
    if isinstance(size, cst.Subscript):
        return _unscaled_config_value(facts, size, scope)
    name = dotted(size)
    if name is None:
        return False  # an expression: cannot decide
    if is_global_batch(facts, frozenset({name}), scope):
        return False  # named global, or computed from the replica count
    found = facts.definitions(name, scope)
    if not found and name in scope.params:  # `def load(files, batch_size)`: what every caller gives
        return not _given_as_global(facts, scope, name) and _given_unscaled(
            facts.values_of(size, scope, END_OF_SCOPE), depth)
    if not found and ("." not in name or (name.startswith("self.") and name.count(".") == 1)):
        return False  # an unknown global, or an attribute a base class sets
    if not found and name.split(".")[0] in scope.params and _made_global_elsewhere(facts, name.rpartition(".")[2]):
        return False  # `cfg.BATCH_SIZE` of a config whose class sets `self.BATCH_SIZE = IMAGES_PER_GPU * GPU_COUNT`
    if found and all(isinstance(a.value, cst.Name) and a.value.value in a.scope.params for a in found):
        # `self.batch_size = batch_size`: what the callers give
        return _given_unscaled([o for a in found for o in a.scope.owner.values_of(a.value, a.scope, a.order)], depth)
    if any(isinstance(a.value, cst.BinaryOperation) and isinstance(a.value.operator, cst.Multiply) for a in found):
        return False  # `PER_GPU * WORKERS`: deliberately made global
    if any(is_global_batch(facts, a.names, a.scope) for a in found):
        return False  # reassigned the global size (`FLAGS.batch_size = GLOBAL_BATCH`)
    if _treated_as_global(facts, name):
        return False
    # A per-replica size derived from it shows the global batch is deliberate; a global one made by
    # multiplying it (`GLOBAL = BATCH * strategy.num_replicas_in_sync`) shows it is the per-replica size.
    return not any(
        reads(a.names, name) and mentions_replica_count(facts, a.names, a.scope)
        and not _scales_up(a.value, lambda e: dotted(e) == name) for a in facts.assigns
    )


def _made_global_elsewhere(facts: ModuleFacts, attribute: str) -> bool:
    """Whether a project file sets an attribute of this name to a product or from a device count
    (`self.BATCH_SIZE = self.IMAGES_PER_GPU * self.GPU_COUNT` in a config class): the size a parameter's
    attribute holds is then the global batch."""
    if facts.loader is None or facts.file is None:
        return False
    made = re.compile(rb"\." + re.escape(attribute.encode()) + rb"[ \t]*=(?!=)[^\n#]*(?:\*|num_replicas|replica|gpu|GPU)")
    return bool(facts.loader.named_elsewhere(facts.file.resolve(), made))


def _treated_as_global(facts: ModuleFacts, name: str) -> bool:
    """Whether a module's code treats the size `name` as the global batch: it gives it as `global_batch_size=`,
    divides by it (a loss summed over the replicas, `examples // it` steps) or scales a learning rate with it
    (`lr = 0.1 * batch_size / 256`)."""
    return (any(reads(names, name) for c in facts.calls for arg, names in zip(c.node.args, c.arg_names)
                if arg.keyword is not None and arg.keyword.value == "global_batch_size")
            or name.removeprefix("self.") in facts.divisors
            or any(_LEARNING_RATE.search(target.rpartition(".")[2]) for a in facts.assigns if reads(a.names, name)
                   for target in a.targets)
            or _divided_by_a_callee(facts, name))


def _divided_by_a_callee(facts: ModuleFacts, name: str) -> bool:
    """`run_training(batch_size=FLAGS.batch_size)`, where `run_training` divides by that parameter (`loss *
    (1. / batch_size)`): the size it is given is the global batch."""
    for call in facts.calls:
        for index, arg in enumerate(call.node.args):
            if arg.star or dotted(arg.value) != name:
                continue
            for callee in facts.callables_of(call.node.func, call.scope, before=call.order):
                params = callee.value_params()
                param = arg.keyword.value if arg.keyword is not None else params[index] if index < len(params) else None
                divisions = m.findall(callee.node, m.BinaryOperation(operator=m.Divide() | m.FloorDivide()))
                if param is not None and any(dotted(node.right) == param for node in divisions):  # type: ignore[attr-defined]
                    return True
    return False


def _given_as_global(facts: ModuleFacts, function: Scope, name: str) -> bool:
    """Whether a caller gives the parameter a name that its module treats as the global batch
    (`load(batch_size=BATCH_SIZE)`, where the loss is scaled by `1.0 / BATCH_SIZE`)."""
    if name not in function.value_params():
        return False
    index = function.value_params().index(name)
    callers = [*facts.callers_of(function), *(facts.loader.callers(function) if facts.loader else ())]
    return any(_global_in(c.scope.owner, call_arg(c.node, index, name)) for c in callers)  # type: ignore[arg-type]


def _global_in(facts: ModuleFacts, given: cst.BaseExpression | None) -> bool:
    """Whether a module treats a size it gives as the global batch: a name (see `_treated_as_global`), or a
    configured entry it divides by (`steps = num_examples // cfg["batch_size"]`)."""
    name = dotted(given)
    if name is not None:
        return _treated_as_global(facts, name)
    if not isinstance(given, cst.Subscript) or string_key(given) is None:
        return False
    key, base = string_key(given), dotted(given.value)
    return any(isinstance(node.right, cst.Subscript) and string_key(node.right) == key
               and dotted(node.right.value) == base for node in facts.divisions)


def _unscaled_config_value(facts: ModuleFacts, size: cst.Subscript, scope: Scope) -> bool:
    """`cfg["batch_size"]`: a configured value, unscaled unless the code derives a per-replica size from that
    entry and the replica count, or gives the entry as `global_batch_size=` (as for a name, below)."""
    key = string_key(size)
    base = dotted(size.value)
    if key is None or base is None or is_global_batch(facts, frozenset({key}), scope):
        return False
    if not facts.definitions(base, scope):
        return False  # a parameter or an unknown global: the mapping's contents are not shown

    def is_entry(node: cst.CSTNode) -> bool:
        return string_key(node) == key and dotted(node.value) == base  # type: ignore[attr-defined]

    def entry_in(node: cst.CSTNode) -> bool:
        return any(is_entry(s) for s in m.findall(node, m.Subscript()))

    scaled = any(reads(a.names, base) and mentions_replica_count(facts, a.names, a.scope) and entry_in(a.value)
                 and not _scales_up(a.value, is_entry) for a in facts.assigns)
    given_as_global = any(arg.keyword is not None and arg.keyword.value == "global_batch_size" and entry_in(arg.value)
                          for c in facts.calls for arg in c.node.args)
    return not scaled and not given_as_global


def _batch_site(chain: DatasetChain) -> tuple[cst.Call, cst.BaseExpression | None, DatasetOp | None, Scope] | None:
    """The call that batches a pipeline last, its size, its step (None: the source batches) and its scope."""
    batching = chain.batch_size()
    if batching is None:
        return None
    op = next((o for o in reversed(chain.ops) if o.batching_call is batching[0]), None)
    where = op.scope if op is not None else chain.source_scope  # the source batches (`image_dataset_from_directory`)
    return (*batching, op, where if where is not None else chain.scope)


def _batches_unscaled(chain: DatasetChain) -> bool:
    """Whether a pipeline the code may build instead (`if train: ... else: ...`) batches unscaled too."""
    site = _batch_site(chain)
    return site is not None and site[1] is not None and _unscaled(site[3].owner, site[1], site[3])  # type: ignore[arg-type]


def _given_unscaled(origins: list[Origin], depth: int) -> bool:
    """A size taken from a parameter (also as `self.batch_size = batch_size`) is what every caller gives, also
    one in another module (`DataLoader(path, config.batch_size)`): unscaled only when each of them is."""
    return depth < 3 and bool(origins) and all(
        o.kind == "value" and not o.path and isinstance(o.expr, cst.BaseExpression)
        and _unscaled(o.model, o.expr, o.scope, depth + 1) for o in origins  # type: ignore[arg-type]
    )


def _scales_up(value: cst.BaseExpression, is_size: Callable[[cst.BaseExpression], bool], depth: int = 0) -> bool:
    """`size * something` (either way round), also as an argument (`Loader(files, size * replicas)`)."""
    if depth > 4:
        return False
    if isinstance(value, cst.BinaryOperation):
        if isinstance(value.operator, cst.Multiply) and (is_size(value.left) or is_size(value.right)):
            return True
        return _scales_up(value.left, is_size, depth + 1) or _scales_up(value.right, is_size, depth + 1)
    if isinstance(value, cst.Call):
        return any(_scales_up(arg.value, is_size, depth + 1) for arg in value.args)
    return False


def _text(size: cst.BaseExpression) -> str:
    """The batch size as the code writes it."""
    return cst.Module([]).code_for_node(size)


def _method(batching: cst.Call) -> str:
    """`batch`, `padded_batch`, `dense_to_ragged_batch`: as the message names the call."""
    func = batching.func
    return func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else "batch"
