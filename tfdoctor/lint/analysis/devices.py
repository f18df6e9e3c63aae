"""How many GPUs a module's per-GPU code can see: the device rules (TFD109, TFD112) stay silent on code that
builds one copy on one GPU."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from tfdoctor.lint.analysis.multiworker import environment_sets
from tfdoctor.lint.analysis.tensorflow import ModuleFacts
from tfdoctor.lint.names import dotted, literal_int, literal_str
from tfdoctor.lint.semantic.collector import AssignFact, CallFact, LoopFact, WithFact


def one_turn(facts: ModuleFacts, loop: LoopFact) -> bool:
    """`for i in [1]:`, or `for i in range(self.num_gpus)` where the count is only ever the literal 1: a loop of
    at most one device builds one copy, on that device."""
    iterated = loop.iter_expr
    if isinstance(iterated, (cst.List, cst.Tuple)):
        return len(iterated.elements) <= 1
    if not (isinstance(iterated, cst.Call) and dotted(iterated.func) == "range" and len(iterated.args) == 1):
        return False
    counts = facts.values_of(iterated.args[0].value, loop.scope, loop.order)
    return bool(counts) and all(o.kind == "value" and not o.path and literal_int(o.expr) in (0, 1) for o in counts)


def one_visible_gpu(facts: ModuleFacts) -> bool:
    """`os.environ["CUDA_VISIBLE_DEVICES"] = "0"` at the top of the module, whatever runs: the process sees one
    GPU, so towers over GPUs are one copy."""
    return any(isinstance(made, AssignFact) and made.scope is facts.module_scope and not made.blocks
               and (literal_str(made.value) or "").strip().isdigit()
               for made in environment_sets(facts, frozenset({"CUDA_VISIBLE_DEVICES"})))


def device_blocks(facts: ModuleFacts) -> Iterator[tuple[WithFact, CallFact]]:
    """Every `with tf.device(...):` block of the module, with its `tf.device` call."""
    for block in facts.withs:
        for item in block.items:
            device = facts.call_fact(item) if isinstance(item, cst.Call) else None
            if device is not None and facts.resolve(device.func) == "tensorflow.device":
                yield block, device
