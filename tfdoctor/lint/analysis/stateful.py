"""What a `Dataset.map` function does, as far as the code shows: whether it is stateful, and whether it is
costly enough that running it on one core matters.

From TensorFlow 2.7 on, tf.data's default `map_parallelization` runs a map whose function is stateless in
parallel even without `num_parallel_calls` (measured on TF 2.21: a stateless map ran 1.9x faster by default
than with the option turned off, as fast as with `num_parallel_calls=AUTOTUNE`). A function that draws
random numbers, runs Python (`py_function`, `numpy_function`) or calls a random Keras layer stays serial.
"""

from __future__ import annotations

import re
from typing import Iterator

import libcst as cst

from tfdoctor.lint.analysis.tensorflow import DatasetOp, ModuleFacts
from tfdoctor.lint.names import call_arg, dotted
from tfdoctor.lint.semantic.collector import CallFact, Scope

PARALLELISES_STATELESS_MAPS = (2, 7)  # `map_parallelization` on by default (TF 2.7 OptimizationOptions docs)
_STATEFUL = re.compile(
    r"^(tensorflow\.(random\.(?!stateless_)\w+|image\.random_\w+|py_function|numpy_function|py_func|"
    r"compat\.v1\.py_func|compat\.v1\.random\.\w+|random_\w+|Variable|print)|"
    r"keras\.layers\.Random\w+|numpy\.random\.\w+)$")
_KNOWN = ("tensorflow.", "keras.", "numpy.", "math.")
# Work worth spreading over cores: reading, decoding, parsing, resizing, signal and string processing, Python
# (TF 1's top-level names too: `tf.decode_csv`, `tf.parse_single_example`).
# Slicing, casting, one-hot or a single flip of a decoded tensor is not (a blind review called a map that did
# only that "negligible next to the training step"), nor `decode_raw`, which reads bytes as numbers (a copy).
_COSTLY = re.compile(
    r"^(tensorflow\.(io\.(read_file|decode_(?!raw$)\w+|parse_\w+|gfile\.\w+)|read_file|decode_(?!raw$)\w+|"
    r"parse_\w+|image\.(decode_\w+|resize\w*|"
    r"crop_and_resize|extract_\w+)|py_function|numpy_function|py_func|compat\.v1\.py_func|audio\.\w+|signal\.\w+|"
    r"strings\.\w+|compat\.v1\.(parse_\w+|decode_(?!raw$)\w+|image\.\w+))|tensorflow_io\.\w+|"
    r"tensorflow_addons\.image\.\w+|"
    r"keras\.layers\.Random\w+)")
_MAX_DEPTH = 3
PY_FUNCTIONS = frozenset({"tensorflow.py_function", "tensorflow.numpy_function", "tensorflow.py_func"})
# h5py runs every call under one global lock: parallel calls of Python that reads through it take turns.
_ONE_LOCK = ("h5py.",)


def map_function_stateful(facts: ModuleFacts, function: cst.BaseExpression | None, scope: Scope,
                          depth: int = 0) -> bool | None:
    """True when the mapped function visibly runs a stateful op (random, Python, a variable, a random
    Keras layer), False when every call it makes is a stateless TensorFlow op or a method of its own
    values, None when the code does not show (an imported helper, a layer object, `self.augment`)."""
    if function is None or depth > _MAX_DEPTH:
        return None
    resolved = facts.resolve(function)
    if resolved is not None:
        return True if _STATEFUL.match(resolved) else (False if resolved.startswith(_KNOWN) else None)
    bodies = facts.callables_of(function, scope)
    if len(bodies) != 1:
        return None
    scopes = list(_with_nested(bodies[0]))  # a lambda given to `tf.map_fn` inside it runs in the map too
    own = {name for inner in scopes for name in (*inner.params, *(t for a in inner.assigns for t in a.targets))}
    verdict: bool | None = False
    for call in (call for inner in scopes for call in inner.calls):
        named = facts.resolve(call.node.func)
        if named is not None:
            if _STATEFUL.match(named):
                return True
            if not named.startswith(_KNOWN):
                verdict = None
            continue
        receiver = dotted(call.node.func.value) if isinstance(call.node.func, cst.Attribute) else None
        if receiver is not None and receiver.split(".")[0] in own and receiver.split(".")[0] != "self":
            continue  # a method of the function's own tensors (`image.set_shape`, `x.get_shape`)
        if _random_layer(facts, call.node.func):
            return True
        inner = map_function_stateful(facts, call.node.func, call.scope, depth + 1)
        if inner:
            return True
        if inner is None:
            verdict = None
    return verdict


def map_function_costly(facts: ModuleFacts, function: cst.BaseExpression | None, scope: Scope,
                        depth: int = 0) -> bool:
    """Whether the mapped function visibly does costly work (`_COSTLY`, or a random augmentation layer),
    itself or in a function of this module that it calls. A function the module does not show is not."""
    if function is None or depth > _MAX_DEPTH:
        return False
    resolved = facts.resolve(function)
    if resolved is not None:
        return bool(_COSTLY.match(resolved))
    bodies = facts.callables_of(function, scope)
    if len(bodies) != 1:
        return False
    for call in (call for inner in _with_nested(bodies[0]) for call in inner.calls):
        named = facts.resolve(call.node.func)
        if named is not None:
            if _COSTLY.match(named):
                return True
        elif _random_layer(facts, call.node.func) or map_function_costly(facts, call.node.func, call.scope, depth + 1):
            return True
    return False


def map_function_cheap(facts: ModuleFacts, function: cst.BaseExpression | None, scope: Scope, depth: int = 0) -> bool:
    """Whether the mapped function visibly does only cheap work: every call it makes is a TensorFlow, Keras,
    NumPy or math op that is not costly (a cast, a reshape, a one-hot), a method of its own values, or a
    function of the module that is cheap in turn. False when it does costly work or the code does not show."""
    if function is None or depth > _MAX_DEPTH:
        return False
    resolved = facts.resolve(function)
    if resolved is not None:
        return resolved.startswith(_KNOWN) and not _COSTLY.match(resolved)
    bodies = facts.callables_of(function, scope)
    if len(bodies) != 1:
        return False
    scopes = list(_with_nested(bodies[0]))
    own = {name for inner in scopes for name in (*inner.params, *(t for a in inner.assigns for t in a.targets))}
    for call in (call for inner in scopes for call in inner.calls):
        named = facts.resolve(call.node.func)
        if named is not None:
            if _COSTLY.match(named) or not named.startswith(_KNOWN):
                return False
            continue
        receiver = dotted(call.node.func.value) if isinstance(call.node.func, cst.Attribute) else None
        if receiver is not None and receiver.split(".")[0] in own and receiver.split(".")[0] != "self":
            continue  # `image.set_shape(...)`
        if _random_layer(facts, call.node.func) or not map_function_cheap(facts, call.node.func, call.scope, depth + 1):
            return False
    return True


def cheap_map(facts: ModuleFacts, op: DatasetOp) -> bool:
    """Whether a pipeline's `map` step visibly does only cheap work, judged in the module that holds the call."""
    home, scope = _home(facts, op)
    return scope is not None and map_function_cheap(home, call_arg(op.call, 0, "map_func"), scope)


def costly_map(facts: ModuleFacts, op: DatasetOp) -> bool:
    """Whether a pipeline's `map` step visibly does costly work, judged in the module that holds the call (a
    loader's, when the pipeline comes from one)."""
    home, scope = _home(facts, op)
    return scope is not None and map_function_costly(home, call_arg(op.call, 0, "map_func"), scope)


def stateful_map(facts: ModuleFacts, op: DatasetOp) -> bool:
    """Whether a pipeline's `map` step visibly runs a stateful op, judged in the module that holds the call."""
    home, scope = _home(facts, op)
    return scope is not None and map_function_stateful(home, call_arg(op.call, 0, "map_func"), scope) is True


def wrapped_python_calls(facts: ModuleFacts, py_call: CallFact) -> set[str]:
    """What the Python function a `py_function` wraps calls (resolved names), itself or through functions of
    this module, and of the project's other modules up to three imports away (`from ..utils.h5 import read`)."""
    names: set[str] = set()
    seen: set[int] = set()
    pending = [(facts, facts.callables_of(call_arg(py_call.node, 0, "func"), py_call.scope), 0)]
    while pending:
        model, roots, depth = pending.pop()
        for function in model.transitive_callees(roots):
            if id(function) in seen:
                continue
            seen.add(id(function))
            for call in function.calls:
                name = model.resolve(call.func)
                if name is not None:
                    names.add(name)
                if depth < 3 and call.func is not None and model.foreign(call.func):
                    others = [s for s in model.callables_of(call.node.func, function) if s.owner is not model]
                    pending.extend((other.owner, [other], depth + 1) for other in others)  # type: ignore[misc]
    return names


def python_under_one_lock(facts: ModuleFacts, op: DatasetOp) -> bool:
    """Whether a `map` step's function runs Python (`py_function`, `numpy_function`) that reads through h5py,
    whose global lock lets one call run at a time: `num_parallel_calls` would not overlap them."""
    home, scope = _home(facts, op)
    if scope is None:
        return False
    functions = home.transitive_callees(home.callables_of(call_arg(op.call, 0, "map_func"), scope))
    return any(home.resolve(call.func) in PY_FUNCTIONS and
               any(name.startswith(_ONE_LOCK) for name in wrapped_python_calls(home, call))
               for function in functions for call in function.calls)


def _home(facts: ModuleFacts, op: DatasetOp) -> tuple[ModuleFacts, Scope | None]:
    """The module that holds a pipeline step's call, and the scope the call is in (None: not found there)."""
    home: ModuleFacts = op.scope.owner if op.scope is not None else facts  # type: ignore[assignment]
    fact = home.call_fact(op.call)
    return home, fact.scope if fact is not None else None


def _random_layer(facts: ModuleFacts, func: cst.BaseExpression) -> bool:
    """A name or attribute the module assigns only from a random augmentation layer's constructor
    (`rand_augment = keras_cv.layers.RandAugment(...)`, `self.flip = layers.RandomFlip()`), or from a
    `Sequential` of such layers (`augment = keras.Sequential([layers.RandomFlip(), layers.RandomRotation(0.1)])`)."""
    name = dotted(func)
    made = [a.value for a in facts.assigns if name is not None and name in a.targets]
    return bool(made) and all(_makes_random_layer(value) for value in made)


def _makes_random_layer(value: cst.BaseExpression) -> bool:
    if not isinstance(value, cst.Call):
        return False
    made = (dotted(value.func) or "").rpartition(".")[2]
    if made.startswith(("Random", "RandAugment")):
        return True
    layers = value.args[0].value if made == "Sequential" and value.args else None
    return isinstance(layers, cst.List) and any(_makes_random_layer(element.value) for element in layers.elements)


def _with_nested(scope: Scope) -> Iterator[Scope]:
    yield scope
    for child in scope.children:
        yield from _with_nested(child)

