"""What a module knows, as the rules read it: the semantic model plus the TensorFlow analysis.

This module only gathers the names rules import; the layers live in `semantic/` (generic Python: the walk,
scopes, definitions, the value lookup, the call graph) and `analysis/` (TensorFlow knowledge).
"""

from tfdoctor.lint.analysis.tensorflow import (
    DATASET_METHODS,
    DISTRIBUTE_DATASET_METHODS,
    RUN_METHODS,
    DatasetChain,
    DatasetOp,
    ModuleFacts,
    cached_before_repeat,
    runs_once,
)
from tfdoctor.lint.semantic.collector import (
    END_OF_SCOPE,
    AssignFact,
    CallFact,
    ClassFact,
    IfFact,
    LoopFact,
    ReturnFact,
    Scope,
    SubscriptFact,
    WithFact,
    reads,
)
from tfdoctor.lint.semantic.model import Origin

__all__ = [
    "DATASET_METHODS", "DISTRIBUTE_DATASET_METHODS", "END_OF_SCOPE", "RUN_METHODS", "AssignFact", "CallFact",
    "ClassFact", "DatasetChain", "DatasetOp", "IfFact", "LoopFact", "ModuleFacts", "Origin", "ReturnFact", "Scope",
    "SubscriptFact", "WithFact", "cached_before_repeat", "reads", "runs_once",
]
