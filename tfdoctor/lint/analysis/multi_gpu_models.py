"""Keras `multi_gpu_model` calls that training runs on, which Keras makes them, and where their template lives:
TFD101 reports those of `tf.keras` (removed in TF 2.4) and standalone Keras's wrapping a `tf.keras` model, TFD113
those of standalone Keras with the template on GPU 0."""

from __future__ import annotations

from typing import Callable, Iterator

import libcst as cst

from tfdoctor.lint.analysis.tensorflow import ModuleFacts
from tfdoctor.lint.names import call_arg, literal_str, main_guard
from tfdoctor.lint.semantic.collector import CallFact

_WEIGHT_MOVES = ("load_weights", "save_weights", "get_weights", "set_weights")  # no training in them


def trained_multi_gpu_models(facts: ModuleFacts) -> Iterator[CallFact]:
    """The `keras.utils.multi_gpu_model` calls (any import spelling) whose parallel model may be trained on."""
    for call in facts.calls:
        name = facts.resolve(call.func)
        if (name is not None and name.startswith("keras.") and name.endswith(".multi_gpu_model")
                and not _result_unused(facts, call)):
            yield call


def standalone_keras(facts: ModuleFacts, call: CallFact) -> bool:
    """Whether the call names the standalone `keras` package's function (`from keras.utils import ...`), not
    `tf.keras`'s, in a module whose Keras is that package (see `keras_mixed`)."""
    return _names_standalone(facts, call) and not keras_mixed(facts, call)


def keras_mixed(facts: ModuleFacts, call: CallFact) -> bool:
    """Whether the call names standalone Keras's function in a module that takes all its other Keras from
    TensorFlow (`from tensorflow import keras`): its model is a `tf.keras` one."""
    if not _names_standalone(facts, call):
        return False
    targets = set(facts.aliases.values())
    standalone = {t for t in targets if t.split(".")[0] == "keras" and not t.endswith("multi_gpu_model")}
    return not standalone and any(t.startswith(("tensorflow.keras", "tensorflow.python.keras")) for t in targets)


def _names_standalone(facts: ModuleFacts, call: CallFact) -> bool:
    """Whether the call's name is imported from the standalone `keras` package."""
    head = (call.func or "").split(".")[0]
    return facts.aliases.get(head, "").split(".")[0] == "keras"


def template_from_caller(call: CallFact) -> bool:
    """Whether the template is a parameter of the function making the parallel model (a wrapper's
    `ModelMGPU(ser_model, gpus)`): where it was built, the caller knows."""
    template = call_arg(call.node, 0, "model")
    return isinstance(template, cst.Name) and template.value in call.scope.value_params()


def template_on_cpu(facts: ModuleFacts, call: CallFact) -> bool:
    """Whether the module places a template on the CPU: the call's `cpu_relocation=True`, or any
    `tf.device(...)` block on a CPU device (the template is built there, or moved; when unsure, it is)."""
    relocation = call_arg(call.node, None, "cpu_relocation")
    if isinstance(relocation, cst.Name) and relocation.value == "True":
        return True
    return any((facts.resolve(c.func) or "").endswith(".device")
               and "cpu" in (literal_str(call_arg(c.node, 0, "device_name")) or "").lower() for c in facts.calls)


def _result_unused(facts: ModuleFacts, call: CallFact) -> bool:
    """`parallel = multi_gpu_model(...)` (or `... if gpus > 1 else model`) and nothing trains on `parallel`:
    in a function or a script's main block nothing reads it afterwards (nor a function defined there); anywhere,
    it only has weights loaded into it or saved from it (a script converting a multi-GPU checkpoint)."""
    name = _parallel_name(call)
    if name is None:
        return False
    moves = {f"{name}.{method}" for method in _WEIGHT_MOVES}
    in_function = call.scope.parent is not None or any(main_guard(i.test) for i in call.ifs)
    if in_function and not _read_later(facts, name, call, lambda later: False):
        return True
    return (any(later.func in moves and later.order > call.order for later in facts.calls)
            and not _read_later(facts, name, call, lambda later: later.func in moves))


def _read_later(facts: ModuleFacts, name: str, call: CallFact, ignore: Callable[[CallFact], bool]) -> bool:
    """Whether code after the call, or a function defined in its scope, reads `name`, calls `ignore` accepts aside."""
    return facts.read_later(name, call.scope, call.order, ignore) or any(
        facts.read_later(name, child, -1, ignore) for child in call.scope.children)


def _parallel_name(call: CallFact) -> str | None:
    """The name the statement of the call assigns the parallel model to (alone, or in a conditional)."""
    assign = next((small for small in getattr(call.statement, "body", ()) if isinstance(small, cst.Assign)
                   and (small.value is call.node or isinstance(small.value, cst.IfExp)
                        and call.node in (small.value.body, small.value.orelse))), None)
    if assign is None or len(assign.targets) != 1 or not isinstance(assign.targets[0].target, cst.Name):
        return None
    return assign.targets[0].target.value
