"""TF1 sessions: a loop that runs a training op with `session.run(..., feed_dict=...)` and feeds it the batches
a Python loop or call produced (`for batch in gen: ... sess.run(train_op, feed_dict={x: batch})`, or
`bx, by = mnist.train.next_batch(n)` in the loop). A `feed_dict` of anything else (a learning rate, dropout
keep-probabilities, a recurrent state fetched by the step before) is not a data feed, and batches a
`tf.data` pipeline yields are left alone."""

from __future__ import annotations

import re
from dataclasses import dataclass

import libcst as cst

from tfdoctor.lint.analysis.inputs import made_by_workers
from tfdoctor.lint.analysis.multiworker import derived_names, expression_names
from tfdoctor.lint.analysis.tensorflow import ModuleFacts
from tfdoctor.lint.names import call_arg, dotted
from tfdoctor.lint.semantic.collector import CallFact, LoopFact, Scope

_UPDATES = frozenset({"minimize", "apply_gradients"})
# The TF1 convention for the op a training session runs, when the code does not show where it was made.
_TRAIN_OP = re.compile(r"^(?:train|train(?:ing)?_?(?:op|ops|step|operation)|opt(?:imi[sz]er)?_op|minimize_op|"
                       r"apply_gradients?_op)$")
# Calls that hand out the next batch from Python: `next(gen)`, `mnist.train.next_batch(n)`, `data.get_batch()`.
_NEXT_BATCH = re.compile(r"^(?:next|(?:get_)?next_batch(?:es)?|(?:get|sample|load)_batch(?:es)?)$")
_COUNTERS = frozenset({"range", "enumerate", "tqdm", "tqdm.tqdm", "trange", "iter"})
# Calls that cost little next to a training step: Python's own, list and dict methods, numpy's building,
# stacking, padding and reshaping of arrays in memory (not its readers), Keras's label and padding helpers.
_CHEAP_BUILTINS = frozenset({
    "len", "range", "min", "max", "list", "tuple", "dict", "set", "zip", "enumerate", "int", "float", "str",
    "bool", "sorted", "reversed", "isinstance", "sum", "abs", "print", "round", "any", "all", "super",
})  # not `next`, `iter` or `map`: what they run (a generator's body, the mapped function) is not shown here
_CHEAP_METHODS = frozenset({
    "append", "extend", "insert", "astype", "reshape", "copy", "toarray", "todense", "tolist", "keys", "values",
    "items", "flatten", "squeeze", "transpose", "ravel", "fill", "index", "count",
    "numpy"})  # a tensor's `.numpy()` in the Python a `py_function` runs: a copy
_NUMPY_READERS = re.compile(r"load|from(?:file|string)|genfromtxt|memmap|read|save")  # `frombuffer` is a view
_CHEAP_HELPERS = frozenset({"to_categorical", "pad_sequences"})
_CLOCKS = frozenset({"time.time", "time.perf_counter", "time.monotonic", "time.process_time"})  # not `time.sleep`


@dataclass(frozen=True)
class SessionFeed:
    """A training op run with a `feed_dict` of Python batches: where those batches come from."""

    source: cst.BaseExpression  # the loop's iterable, or the call that returns the batch
    statement: cst.CSTNode


def session_feeds(facts: ModuleFacts) -> list[SessionFeed]:
    """Every `session.run` of a training op in a loop whose `feed_dict` carries the loop's batches."""
    found = []
    for call in facts.calls:
        feed = call_arg(call.node, 1, "feed_dict") if call.attr == "run" and call.loops else None
        if feed is None or not runs_training_op(facts, call):
            continue
        names = derived_names(facts, _fed_names(facts, feed, call), call.scope, strings=False)
        source = _batch_source(facts, call, names)
        if (source is not None and not slices_in_memory(facts, source[0], call.scope, call.order)
                and not _method_not_shown(facts, source[0], call.scope, call.order)
                and not made_by_workers(facts, source[0], call.scope, call.order)):
            found.append(SessionFeed(*source))
    return found


def _method_not_shown(facts: ModuleFacts, source: cst.BaseExpression, scope: Scope, order: int) -> bool:
    """`batches.iter_batches(n)` on an instance of a project class that does not define the method (a base
    class from elsewhere does, or nothing does): what it hands out cannot be seen."""
    if not (isinstance(source, cst.Call) and isinstance(source.func, cst.Attribute)):
        return False
    method = source.func.attr.value
    made = facts.values_of(source.func.value, scope, order, parameters=False)
    classes = [origin.model.class_and_module(dotted(origin.expr.func))
               if origin.kind == "value" and isinstance(origin.expr, cst.Call) else None for origin in made]
    return bool(classes) and all(
        found is not None and found[1].method_named(found[0].name, method, cross_module=True) is None
        for found in classes)


def slices_in_memory(facts: ModuleFacts, source: cst.BaseExpression, scope: Scope, order: int) -> bool:
    """Batches that are slices of arrays already in memory, whose feed costs a copy: `mnist.train.next_batch(n)`
    of the tutorials' `read_data_sets`; a generator of this module, or the `__getitem__` of a class of it (a
    Keras `Sequence`), that only hands out slices (`yield x[i:i + n], y[i:i + n]`, a dict of them, or names it
    binds only to them), called directly or through `next(...)`; or a loop over `zip` of numpy arrays the code
    builds (`for x, y in zip(train_X, train_Y)` after `train_X = np.linspace(-1, 1, 100)`)."""
    if isinstance(source, cst.Call) and dotted(source.func) == "next" and source.args:
        source = source.args[0].value
    if isinstance(source, cst.Call) and isinstance(source.func, cst.Attribute) and source.func.attr.value == "next_batch":
        root = source.func.value
        while isinstance(root, cst.Attribute):  # `mnist.train` -> `mnist`
            root = root.value
        made = facts.values_of(root, scope, order) if isinstance(root, cst.Name) else []  # a parameter's arguments
        return bool(made) and all(o.kind == "value" and isinstance(o.expr, cst.Call)
                                  and (dotted(o.expr.func) or "").endswith("read_data_sets") for o in made)
    if isinstance(source, cst.Call) and dotted(source.func) == "zip" and source.args:
        return all(_numpy_array(facts, a.value, scope, order) for a in source.args)
    if dotted(source) is not None:
        made = [a.value for a in facts.definitions(dotted(source), scope, order)]  # type: ignore[arg-type]
        source = made[0] if len(made) == 1 else source
    if not isinstance(source, cst.Call):
        return False
    return hands_out_slices(facts, source.func, scope)


def hands_out_slices(facts: ModuleFacts, producer: cst.BaseExpression, scope: Scope) -> bool:
    """Whether a generator function of this module, or a class's `__getitem__` (of this module or imported
    from the project's), hands out only slices of arrays in memory (see `slices_in_memory`), or builds its
    batches with nothing but cheap array work: Python's builtins, numpy's array building, stacking, padding
    and reshaping (`np.zeros`, `np.pad`, `np.stack`, not its readers), `to_categorical`, `pad_sequences`, and
    functions or methods of the project that do only that."""
    name = dotted(producer) or ""
    class_fact = facts.class_named(name)
    imported = facts.imported(name) if class_fact is None and name and "." not in name else None
    if imported is not None and imported[1] is not None:  # `from utils import DataGenerator`
        class_fact = imported[0].class_named(imported[1])
    if class_fact is not None:
        method = class_fact.methods.get("__getitem__")
        return method is not None and bool(method.returns) and (
            all(_slices(r.value, method) for r in method.returns) or little_python_work(method))
    generators = facts.callables_of(producer, scope)
    if len(generators) == 1 and isinstance(generators[0].node, cst.Lambda) and isinstance(
            generators[0].node.body, cst.Call):  # `lambda: batches(x, y, 32)`
        return hands_out_slices(facts, generators[0].node.body.func, generators[0])
    return len(generators) == 1 and generators[0].is_generator and bool(generators[0].yields) and (
        all(_slices(y.value, generators[0]) for y in generators[0].yields) or little_python_work(generators[0]))


def little_python_work(producer: Scope, depth: int = 0) -> bool:
    """Whether every call the function makes (in nested lambdas and functions too) is cheap array work (see
    `hands_out_slices`), following the project's functions and methods it calls three deep: what it costs per
    call is about a copy of what it hands out."""
    model = producer.owner
    if depth > 3 or model is None:
        return False
    pending = [producer]
    while pending:
        scope = pending.pop()
        pending.extend(scope.children)
        for call in scope.calls:
            if _cheap_call(model, call):
                continue
            callees = model.callables_of(call.node.func, scope)  # type: ignore[attr-defined]
            if not callees or not all(little_python_work(callee, depth + 1) for callee in callees):
                return False
    return True


def _cheap_call(model: ModuleFacts, call: CallFact) -> bool:
    """A call of Python's builtins, `random` or `math`, a clock (`time.time()`: a `__getitem__` timing itself),
    a cheap list, dict or array method, numpy (but its readers), or a Keras label or padding helper."""
    name = model.resolve(call.func) or ""
    last = (call.func or "").rpartition(".")[2]
    if name.startswith("numpy."):
        return not _NUMPY_READERS.search(name.rpartition(".")[2])
    if name.startswith(("random.", "math.")) or name in _CLOCKS:
        return True
    if call.func in _CHEAP_BUILTINS and not name:
        return model.callables_of(call.node.func, call.scope) == []
    return last in _CHEAP_HELPERS or (call.attr in _CHEAP_METHODS and not name)


def _slices(value: cst.BaseExpression | None, producer: Scope) -> bool:
    """`x[i:i + n]` (also `.astype(...)` of one) or `self.pool[i]`, a tuple, a list or a dict of them, or a name
    the producer binds only to them (`seqs = rest[:n]`, `batch = {"x": x[a:b]}`, then `batch["w"] = w[a:b]`)."""
    if isinstance(value, (cst.Tuple, cst.List)):
        return bool(value.elements) and all(_slices(e.value, producer) for e in value.elements)
    if isinstance(value, cst.Dict):
        return bool(value.elements) and all(
            isinstance(e, cst.DictElement) and _slices(e.value, producer) for e in value.elements)
    if isinstance(value, cst.Name):
        name, item = value.value, f"{value.value}[]"
        bound = [a for a in producer.assigns if name in a.targets or item in a.targets]
        return any(name in a.targets for a in bound) and all(
            a.targets in ((name,), (item,)) and a.operator == "=" and _slices(a.value, producer) for a in bound)
    return _a_slice(value)


def _a_slice(value: cst.BaseExpression | None) -> bool:
    """`x[i:i + n]` (or its `.astype(...)`), or an element of what the object made before (`self.pool[i]`: a
    batch built once, handed out again)."""
    if (isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and value.func.attr.value == "astype"):
        value = value.func.value
    if not isinstance(value, cst.Subscript):
        return False
    return any(isinstance(e.slice, cst.Slice) for e in value.slice) or (dotted(value.value) or "").startswith("self.")


def _numpy_array(facts: ModuleFacts, expr: cst.BaseExpression, scope: Scope, order: int) -> bool:
    """A name bound only to numpy calls (`np.linspace(...)`) or arithmetic on them: an array in memory."""
    name = dotted(expr)
    made = [a.value for a in facts.definitions(name, scope, order)] if name is not None else []

    def numpy_value(value: cst.BaseExpression) -> bool:
        if isinstance(value, cst.BinaryOperation):
            return numpy_value(value.left) or numpy_value(value.right)
        return isinstance(value, cst.Call) and (facts.resolve(value.func) or "").startswith("numpy.")

    return bool(made) and all(numpy_value(v) for v in made)


def runs_training_op(facts: ModuleFacts, call: CallFact) -> bool:
    """Whether the fetches hold an op made by `minimize`/`apply_gradients`, or one named like a train op."""
    pending = [call_arg(call.node, 0, "fetches")]
    while pending:
        node = pending.pop()
        if isinstance(node, (cst.List, cst.Tuple)):
            pending.extend(e.value for e in node.elements)
        elif isinstance(node, cst.BinaryOperation):
            pending.extend((node.left, node.right))
        elif (name := dotted(node)) is not None:
            if _TRAIN_OP.match(name.rsplit(".", 1)[-1]):
                return True
            for origin in facts.values_of(node, call.scope, call.order):
                value = origin.expr
                if (isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute)
                        and value.func.attr.value in _UPDATES):
                    return True
    return False


def _fed_names(facts: ModuleFacts, feed: cst.BaseExpression, call: CallFact) -> frozenset[str]:
    """The names the values of a `feed_dict` read: of its literal, or of the dict variable's assignments and
    `update(...)`s in the function before the run."""
    name = dotted(feed)
    if name is None:
        return _dict_values(feed)
    found = set()
    for assign in facts.definitions(name, call.scope, call.order):
        found |= _dict_values(assign.value)
    for update in facts.method_calls("update"):
        if update.scope is call.scope and update.order < call.order and dotted(update.receiver) == name:
            found |= frozenset().union(*update.arg_names)
    return frozenset(found)


def _dict_values(expr: cst.BaseExpression | None) -> frozenset[str]:
    if isinstance(expr, cst.Dict):
        return frozenset().union(*(expression_names(e.value, strings=False) for e in expr.elements
                                   if isinstance(e, cst.DictElement)))
    if isinstance(expr, cst.DictComp):
        return expression_names(expr.value, strings=False) | expression_names(expr.for_in.iter, strings=False)
    return expression_names(expr, strings=False) if isinstance(expr, cst.Call) else frozenset()


def _batch_source(facts: ModuleFacts, call: CallFact,
                  names: frozenset[str]) -> tuple[cst.BaseExpression, cst.CSTNode] | None:
    """The loop over batches whose items the feed reads (innermost first), or the next-batch call in the
    run's loop whose result it reads. A loop over `range(...)` counts steps, not batches; one over a
    `tf.data` pipeline has its fix elsewhere (feed the graph from the pipeline's iterator)."""
    for loop in reversed(call.loops):
        if (isinstance(loop.node, cst.For) and loop.iter_expr is not None and set(loop.targets) & names
                and not _counts(facts, loop)):
            chain = facts.dataset_chain(loop.iter_expr, loop.scope, loop.order, any_source=True)
            return (loop.iter_expr, loop.node) if chain is None else None
    loop = call.loops[-1]
    for assign in facts.assigns:
        value = assign.value
        if (assign.scope is call.scope and assign.order < call.order and assign.loops
                and assign.loops[-1] is loop and set(assign.targets) & names and isinstance(value, cst.Call)
                and _NEXT_BATCH.match((dotted(value.func) or "").rsplit(".", 1)[-1])):
            return value, assign.statement
    return None


def _counts(facts: ModuleFacts, loop: LoopFact) -> bool:
    """`for i in range(n)` (also through `enumerate`, `tqdm`, and a name bound to one: `pbar = tqdm(range(n))`):
    a step counter."""
    expr = loop.iter_expr
    name = dotted(expr) if expr is not None else None
    if name is not None:
        made = facts.definitions(name, loop.scope, loop.order)
        expr = made[-1].value if len(made) == 1 else expr
    while isinstance(expr, cst.Call) and dotted(expr.func) in _COUNTERS:
        if dotted(expr.func) in ("range", "trange"):
            return True
        expr = call_arg(expr, 0, None)
    return False


# -- a second batch pulled in one step ------------------------------------------------------------------------
# Calls that make a TF 1 iterator, whose `get_next()` takes a new batch each time a session evaluates it.
_ITERATOR_MAKERS = re.compile(r"^(?:make_(?:one_shot|initializable)_iterator|from_string_handle|from_structure|"
                              r"Iterator)$")
# A fetch named like an update: it may train on the batch it takes.
_UPDATE_NAME = re.compile(r"optim|train|update|minimi|apply|solver", re.IGNORECASE)
# TF 1 queue batches: each evaluation dequeues a new batch.
_QUEUE_BATCHES = frozenset({"tensorflow.train.batch", "tensorflow.train.shuffle_batch", "tensorflow.train.batch_join",
                            "tensorflow.train.shuffle_batch_join"})


@dataclass(frozen=True)
class SecondPull:
    """A `session.run` in a training loop that evaluates another batch of the iterator the training run of the
    same iteration consumes."""

    run: CallFact
    train: CallFact
    source: str  # `iterator.get_next()`, or the queue batch call


def second_pulls(facts: ModuleFacts) -> list[SecondPull]:
    """Every `session.run` that runs on each iteration of a loop (under no `if` of the loop), fetches no training
    op but something computed from an iterator's `get_next()` (or a TF 1 queue batch), beside a run of the same
    session in the same loop that trains on that iterator, with the same values fed to what leads to it (a
    `feed_dict` that feeds the batch itself or another iterator's handle makes it a different batch)."""
    return facts.memo("second_pulls", lambda: _second_pulls(facts))


def _second_pulls(facts: ModuleFacts) -> list[SecondPull]:
    loops: dict[int, list[CallFact]] = {}
    for call in facts.calls:
        if call.attr == "run" and call.loops and dotted(call.receiver) is not None:
            loops.setdefault(id(call.loops[-1]), []).append(call)
    found = []
    for runs in loops.values():
        trains = [c for c in runs if runs_training_op(facts, c)]
        for run in runs:
            if not trains or run in trains or _gated_in_loop(facts, run) or _may_train(run):
                continue
            pulled, path = _pulls(facts, run)
            for train in trains:
                if dotted(train.receiver) != dotted(run.receiver):
                    continue
                common = sorted(set(pulled) & set(_pulls(facts, train)[0]))
                if common and _same_feed(facts, run, train, path):
                    found.append(SecondPull(run, train, common[0]))
                    break
    return found


def _may_train(run: CallFact) -> bool:
    """Whether a run fetches something named like an update the module does not show (`self.g_optim`): a
    second training op (a GAN's generator step) trains on the batch it takes."""
    fetched = run.arg_names[0] if run.arg_names else frozenset()
    return any(_UPDATE_NAME.search(name.rsplit(".", 1)[-1]) for name in fetched)


def _gated_in_loop(facts: ModuleFacts, call: CallFact) -> bool:
    """Whether a call sits under an `if` inside its innermost loop."""
    loop = call.loops[-1]
    inside = {id(fact.node) for fact in facts.if_facts if any(l is loop for l in fact.loops)}
    return any(id(branch) in inside for branch in call.ifs)


def _pulls(facts: ModuleFacts, run: CallFact) -> tuple[dict[str, None], frozenset[str]]:
    """The batch sources a run's fetches are computed from (through assignments, eight levels), and the names
    met on the way."""
    fetches = call_arg(run.node, 0, "fetches")
    found: dict[str, None] = {}
    seen: set[str] = set()
    parts = [e.value for e in fetches.elements if isinstance(e, cst.DictElement)] if isinstance(fetches, cst.Dict) \
        else [fetches]
    for part in parts:  # a dict of fetches: its values
        _walk(facts, part, run.scope, run.order, 0, found, seen)
    return found, frozenset(seen)


def _walk(facts: ModuleFacts, expr: cst.BaseExpression | None, scope: Scope, before: int, depth: int,
          found: dict[str, None], seen: set[str]) -> None:
    if expr is None or depth > 8 or len(seen) > 200:
        return
    for source, receiver in _sources(facts, expr, scope, 0):
        found[source] = None
        if receiver is not None:  # what the iterator is made from (a handle fed by the run) is on the way too
            _walk(facts, receiver, scope, before, depth + 1, {}, seen)
    for name in expression_names(expr, strings=False):
        if name in seen or not name.replace(".", "").isidentifier():
            continue
        seen.add(name)
        for assign in facts.definitions(name, scope, before if depth == 0 else None):
            _walk(facts, assign.value, assign.scope, assign.order, depth + 1, found, seen)


def _sources(facts: ModuleFacts, expr: cst.CSTNode, scope: Scope,
             depth: int) -> list[tuple[str, cst.BaseExpression | None]]:
    """The batch sources evaluated by an expression itself: `it.get_next()` of an iterator (with the iterator),
    or a queue batch."""
    if depth > 6:
        return []
    if isinstance(expr, cst.Call):
        if isinstance(expr.func, cst.Attribute) and expr.func.attr.value == "get_next" and not expr.args:
            receiver = expr.func.value
            if _iterator(facts, receiver, scope):
                return [(f"{facts.module.code_for_node(receiver)}.get_next()", receiver)]
        if facts.resolve(expr.func) in _QUEUE_BATCHES:
            return [(f"{dotted(expr.func)}(...)", None)]
        parts: list[cst.CSTNode] = [expr.func, *(a.value for a in expr.args)]
    elif isinstance(expr, (cst.Attribute, cst.Subscript)):
        parts = [expr.value]
    elif isinstance(expr, (cst.Tuple, cst.List)):
        parts = [e.value for e in expr.elements]
    elif isinstance(expr, cst.BinaryOperation):
        parts = [expr.left, expr.right]
    else:
        return []
    return [s for part in parts for s in _sources(facts, part, scope, depth + 1)]


def _iterator(facts: ModuleFacts, receiver: cst.BaseExpression, scope: Scope) -> bool:
    """Whether `x` in `x.get_next()` is a TF 1 iterator: made by `make_one_shot_iterator` and the like, here or
    in the assignments of its name."""
    values: list[cst.BaseExpression] = [receiver]
    name = dotted(receiver)
    if name is not None:
        values = [a.value for a in facts.definitions(name, scope) if a.operator == "="]
    return bool(values) and all(isinstance(v, cst.Call) and _ITERATOR_MAKERS.match(_called_name(v)) for v in values)


def _called_name(call: cst.Call) -> str:
    """The last name of what a call calls (`make_one_shot_iterator` in `ds.make_one_shot_iterator()`)."""
    func = call.func
    return func.attr.value if isinstance(func, cst.Attribute) else (dotted(func) or "").rsplit(".", 1)[-1]


def _same_feed(facts: ModuleFacts, run: CallFact, train: CallFact, path: frozenset[str]) -> bool:
    """Whether what a run feeds on the way to the batch is what the training run feeds: keys of its
    `feed_dict` on that way (the iterator's handle, the batch itself) with the same values in both."""
    feed = call_arg(run.node, 1, "feed_dict")
    if feed is None:
        return True
    if not isinstance(feed, cst.Dict):
        return False
    given = _feed_items(facts, call_arg(train.node, 1, "feed_dict"))
    for element in feed.elements:
        if not isinstance(element, cst.DictElement):
            return False
        key = facts.module.code_for_node(element.key)
        if derived_names(facts, expression_names(element.key, strings=False), run.scope, strings=False) & path:
            if given is None or given.get(key) != facts.module.code_for_node(element.value):
                return False
    return True


def _feed_items(facts: ModuleFacts, feed: cst.BaseExpression | None) -> dict[str, str] | None:
    """A literal `feed_dict`'s keys and values as code ({} for none); None when it is not a literal."""
    if feed is None:
        return {}
    if not isinstance(feed, cst.Dict) or not all(isinstance(e, cst.DictElement) for e in feed.elements):
        return None
    return {facts.module.code_for_node(e.key): facts.module.code_for_node(e.value)
            for e in feed.elements if isinstance(e, cst.DictElement)}
