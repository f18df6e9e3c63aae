"""Questions about values that several rules ask, as the rules import them: where a batch comes from, how
a loss is scaled, whether a batch size is global, what a training step is. They live in `analysis/`."""

from __future__ import annotations

from tfdoctor.lint.analysis.inputs import (
    Provenance,
    TrainingInput,
    is_python_iterator_class,
    iterable_provenance,
    training_chains,
    training_inputs,
    value_provenance,
)
from tfdoctor.lint.analysis.losses import (
    Loss,
    LossKind,
    differentiated_losses,
    is_global_batch,
    keras_loss_reduction,
    loss_kind,
    mentions_replica_count,
)
from tfdoctor.lint.analysis.steps import (
    TRAINING_ATTRS,
    calls_training_step,
    gated_by_step_modulo,
    gated_if,
    loop_ifs,
    returns_host_values,
    training_loops,
    training_step_scopes,
)
from tfdoctor.lint.analysis.tensorflow import ModuleFacts
from tfdoctor.lint.semantic.collector import AssignFact, Scope


def definitions(facts: ModuleFacts, name: str, scope: Scope, before: int | None = None) -> list[AssignFact]:
    """Assignments of `name` visible from `scope` (see `SemanticModel.definitions`)."""
    return facts.definitions(name, scope, before)


__all__ = [
    "TRAINING_ATTRS", "Loss", "LossKind", "Provenance", "TrainingInput", "calls_training_step", "definitions",
    "differentiated_losses", "gated_by_step_modulo", "gated_if", "loop_ifs", "is_global_batch", "is_python_iterator_class",
    "iterable_provenance", "keras_loss_reduction", "loss_kind", "mentions_replica_count", "returns_host_values",
    "training_chains", "training_inputs", "training_loops", "training_step_scopes", "value_provenance",
]
