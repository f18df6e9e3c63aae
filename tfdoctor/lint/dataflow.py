"""Questions about values that several rules ask, as the rules import them: where a batch comes from, how
a loss is scaled, whether a batch size is global, what a training step is, what runs or writes on which
worker of a multi-worker or Horovod job. They live in `analysis/`."""

from __future__ import annotations

from tfdoctor.lint.analysis.devices import device_blocks, one_turn, one_visible_gpu
from tfdoctor.lint.analysis.global_batches import UnscaledBatch, unscaled_batches
from tfdoctor.lint.analysis.multi_gpu_models import (
    keras_mixed,
    standalone_keras,
    template_from_caller,
    template_on_cpu,
    trained_multi_gpu_models,
)
from tfdoctor.lint.analysis.inputs import (
    GENERATOR_FUNCTION,
    ITERATOR_CLASS,
    DATASET_ONLY_METHODS,
    PLAIN_TENSOR,
    FedElsewhere,
    Provenance,
    TrainingInput,
    fed_elsewhere,
    is_python_iterator_class,
    cached_later,
    evaluation_step,
    iterable_provenance,
    made_by_workers,
    paced_by_python,
    random_data,
    repeats_one_batch,
    loaded_arrays,
    slices_of_memory,
    training_chains,
    training_inputs,
    value_provenance,
)
from tfdoctor.lint.analysis.losses import (
    Loss,
    LossKind,
    OneOfList,
    differentiated_losses,
    is_global_batch,
    keras_loss_reduction,
    loss_kind,
    mentions_replica_count,
    one_loss_of_list,
)
from tfdoctor.lint.analysis.multiworker import (
    GUARD_WORDS,
    apart_from_multi_worker,
    broadcast_calls,
    broadcasts_otherwise,
    call_list,
    callback_is,
    calls_any,
    derived_names,
    distributed_program,
    distributes,
    environment_sets,
    escapes,
    expression_names,
    fit_callbacks,
    graph_mode,
    guard_test,
    horovod_calls,
    horovod_init,
    horovod_member,
    horovod_module,
    horovod_off,
    horovod_place_sets,
    horovod_scope,
    in_host_scratch,
    keras2_code,
    keras2_imported,
    keras_package_imported,
    keras3_callback,
    keras3_file_name,
    keras3_unknown,
    launches_processes,
    line_text,
    mentions_worker_count,
    multi_worker_mirrored,
    multi_worker_model_scope,
    on_shared_storage,
    only_multi_worker,
    only_one_device,
    optimizer_learning_rate,
    parameter_server,
    path_from_outside,
    runs_on_one_worker,
    same_start_everywhere,
    saved_under_strategy,
    saves_beside,
    sync_on_read_state,
    tf_config_sets,
    trains,
    unknown_value,
    when_distributed,
    worker_guard,
    wraps_horovod_optimizer,
    write_kind,
)
from tfdoctor.lint.analysis.optimizers import Optimizer, applied_optimizer
from tfdoctor.lint.analysis.sessions import (
    SecondPull,
    SessionFeed,
    hands_out_slices,
    little_python_work,
    runs_training_op,
    second_pulls,
    session_feeds,
    slices_in_memory,
)
from tfdoctor.lint.analysis.stateful import (
    PARALLELISES_STATELESS_MAPS,
    PY_FUNCTIONS,
    cheap_map,
    costly_map,
    map_function_stateful,
    python_under_one_lock,
    stateful_map,
    wrapped_python_calls,
)
from tfdoctor.lint.analysis.steps import (
    TRAINING_ATTRS,
    applies_gradients,
    calls_training_step,
    counters_read,
    evaluation_name,
    gated_if,
    gated_periodically,
    in_test_code,
    loop_ifs,
    reduce_op,
    returns_host_values,
    runs_many_steps,
    runs_of,
    runs_once,
    step_counter,
    summed_over_replicas,
    training_loops,
    training_step_scopes,
)
from tfdoctor.lint.analysis.tensorflow import ModuleFacts
from tfdoctor.lint.semantic.collector import AssignFact, Scope


def definitions(facts: ModuleFacts, name: str, scope: Scope, before: int | None = None) -> list[AssignFact]:
    """Assignments of `name` visible from `scope` (see `SemanticModel.definitions`)."""
    return facts.definitions(name, scope, before)


__all__ = [
    "GENERATOR_FUNCTION", "ITERATOR_CLASS",
    "DATASET_ONLY_METHODS", "FedElsewhere", "GUARD_WORDS", "Loss", "LossKind", "OneOfList", "Optimizer",
    "PARALLELISES_STATELESS_MAPS", "PLAIN_TENSOR", "PY_FUNCTIONS", "Provenance", "SecondPull", "SessionFeed", "TRAINING_ATTRS", "TrainingInput", "apart_from_multi_worker", "applied_optimizer",
    "applies_gradients", "broadcast_calls", "broadcasts_otherwise", "cached_later", "call_list", "callback_is", "calls_any", "calls_training_step", "cheap_map", "costly_map",
    "counters_read", "definitions", "derived_names", "device_blocks", "differentiated_losses", "environment_sets", "escapes", "evaluation_name", "evaluation_step", "expression_names",
    "fed_elsewhere", "fit_callbacks", "gated_if", "gated_periodically", "graph_mode", "guard_test",
    "hands_out_slices", "horovod_calls",
    "horovod_init", "horovod_member", "horovod_module", "horovod_off", "horovod_place_sets", "horovod_scope",
    "in_host_scratch", "in_test_code", "is_global_batch", "is_python_iterator_class", "iterable_provenance", "keras2_code",
    "keras2_imported", "keras_package_imported", "keras3_callback", "keras3_file_name", "keras3_unknown", "keras_loss_reduction", "launches_processes", "line_text", "little_python_work",
    "loaded_arrays", "made_by_workers", "loop_ifs", "loss_kind", "map_function_stateful", "mentions_replica_count", "mentions_worker_count", "multi_worker_mirrored",
    "multi_worker_model_scope", "on_shared_storage", "one_loss_of_list", "one_turn", "one_visible_gpu", "only_multi_worker", "only_one_device",
    "optimizer_learning_rate",
    "paced_by_python", "parameter_server", "path_from_outside", "python_under_one_lock", "random_data", "repeats_one_batch", "returns_host_values", "stateful_map", "runs_many_steps", "runs_of", "runs_on_one_worker", "runs_once", "runs_training_op",
    "same_start_everywhere", "saved_under_strategy", "standalone_keras", "template_from_caller", "template_on_cpu",
    "trained_multi_gpu_models", "saves_beside", "second_pulls", "session_feeds", "slices_in_memory", "step_counter",
    "sync_on_read_state", "tf_config_sets", "training_chains", "training_inputs", "training_loops",
    "training_step_scopes", "trains", "unknown_value", "UnscaledBatch", "unscaled_batches", "value_provenance", "when_distributed", "wraps_horovod_optimizer", "worker_guard", "wrapped_python_calls", "write_kind",
]
