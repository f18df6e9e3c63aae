"""What the multi-worker and Horovod rules (TFD5xx) ask of a module, answered from the semantic model: which
multi-worker strategy it builds, whether it is a Horovod program and what a name is in Horovod, whether code
runs on the chief (or rank 0) only, which calls write models, checkpoints or logs, which callbacks reach `fit`,
and whether an expression is computed from the worker count.

Precision first: every helper answers "unknown" (None, or True for "guarded") when the module does not show
the answer, so a rule stays silent. Where a question is about a helper function as a whole (does
`_is_chief` or `write_filepath` know the worker?), its source is rendered once, only for files that have a
candidate.
"""

from __future__ import annotations

import re
from typing import Callable, Iterable, Iterator, TypeVar

import libcst as cst

from tfdoctor.lint.analysis.tensorflow import DISTRIBUTE_DATASET_METHODS, RUN_METHODS, STRATEGY_WORD, ModuleFacts
from tfdoctor.lint.semantic.conditions import excluded_after, exclusive
from tfdoctor.lint.semantic.collector import END_OF_SCOPE, AssignFact, CallFact, Scope, WithFact, reads
from tfdoctor.lint.semantic.model import Origin, SemanticModel
from tfdoctor.lint.names import call_arg, dotted, in_part, literal_str, string_key, value_alternatives
from tfdoctor.lint.notebooks import cell_place
from tfdoctor.lint.versions import Target

_HOROVOD_PREFIXES = ("horovod.tensorflow.keras.", "horovod.tensorflow.", "horovod.keras.", "horovod._keras.")
MULTI_WORKER_MIRRORED = frozenset({
    "tensorflow.distribute.MultiWorkerMirroredStrategy",
    "tensorflow.distribute.experimental.MultiWorkerMirroredStrategy",
    "tensorflow.distribute.CollectiveAllReduceStrategy",
    "tensorflow.distribute.experimental.CollectiveAllReduceStrategy",
})
PARAMETER_SERVER = frozenset({
    "tensorflow.distribute.ParameterServerStrategy", "tensorflow.distribute.experimental.ParameterServerStrategy",
})
# Words of a test that decides which worker runs the code: task type/id, the chief, a Horovod rank.
GUARD_WORDS = re.compile(
    r"task_type|task_id|task_index|chief|rank|master|main_process|worker_index|worker_id|is_root|primary|TF_CONFIG|"
    r"cluster_resolver|should_checkpoint|should_save",
    re.IGNORECASE,
)
# Names in a path that make it differ between workers (the tutorial's `write_filepath(path, task_type, task_id)`),
# or keep it in memory (`model.save(h5py.File(io.BytesIO()))`).
_PER_WORKER_PATH = re.compile(
    r"task|worker|rank|chief|temp|tmp|write_|mkdtemp|gettempdir|uuid|getpid|hostname|gethostname|node|BytesIO",
    re.IGNORECASE,
)
_WORKER_COUNT = re.compile(r"size|world|num_workers|num_gpus|n_gpus|ngpus|num_replicas|nproc|scale", re.IGNORECASE)
_SAVE_RECEIVER = re.compile(
    r"model|ckpt|checkpoint|manager|saver|net|network|classifier|autoencoder|generator|discriminator|encoder|"
    r"decoder|keras|estimator|trainer|learner|agent",
    re.IGNORECASE,
)
_SAVE_FUNCTIONS = frozenset({"tensorflow.saved_model.save", "keras.models.save_model", "keras.saving.save_model",
                             "keras.experimental.export_saved_model"})
_SUMMARY_WRITERS = frozenset({"tensorflow.summary.create_file_writer", "tensorflow.summary.FileWriter",
                              "tensorflow.contrib.summary.create_file_writer"})
_CALLBACK_WRITERS = frozenset({"ModelCheckpoint", "TensorBoard"})
_KERAS2_ROOTS = ("tf_keras", "tensorflow.python.keras")
_PLAIN = frozenset({"float", "int", "max", "min", "round", "abs", "pow"})


# -- Horovod -------------------------------------------------------------------------------------------------
def horovod_member(facts: ModuleFacts, node: cst.CSTNode | str | None) -> str | None:
    """`DistributedOptimizer` for `hvd.DistributedOptimizer` (any of the TensorFlow/Keras Horovod modules),
    `callbacks.BroadcastGlobalVariablesCallback` for a name under `hvd.callbacks`; None otherwise."""
    name = facts.resolve(node)
    if name is None:
        return None
    return next((name[len(prefix):] for prefix in _HOROVOD_PREFIXES if name.startswith(prefix)), None)


def horovod_calls(facts: ModuleFacts, *members: str) -> list[CallFact]:
    """Calls of Horovod functions or classes whose last name component is one of `members`."""
    wanted = set(members)
    return [c for c in facts.calls if (m := horovod_member(facts, c.func)) is not None and m.split(".")[-1] in wanted]


HOROVOD_OPTIMIZER_DEPTH = 2  # `main.py` imports the model function, which imports its optimizer's module


def wraps_horovod_optimizer(facts: ModuleFacts) -> bool:
    """Whether `hvd.DistributedOptimizer` wraps an optimizer in the module or in a project module it imports,
    up to HOROVOD_OPTIMIZER_DEPTH imports away."""
    return bool(horovod_calls(facts, "DistributedOptimizer")) or any(
        isinstance(module, ModuleFacts) and horovod_calls(module, "DistributedOptimizer")
        for module in facts.imported_within(HOROVOD_OPTIMIZER_DEPTH))


def horovod_module(facts: ModuleFacts) -> bool:
    """Whether the module is Horovod training code: it calls `hvd.init()` and trains, or builds Horovod's
    optimizer, tape or callbacks (a helper module that makes `get_callbacks()` for the training script)."""
    return (bool(horovod_init(facts)) and trains(facts)) or (not _test_module(facts) and any(
        (m := horovod_member(facts, c.func)) is not None
        and (m.startswith("callbacks.") or m in ("DistributedOptimizer", "DistributedGradientTape"))
        for c in facts.calls
    ))


def horovod_init(facts: ModuleFacts) -> list[CallFact]:
    """The `hvd.init()` calls of a Horovod training program. A module without one is not such a program,
    and neither is a module of tests, which calls it to test Horovod itself."""
    cached = facts.__dict__.get("_horovod_init")
    if cached is None:
        calls = [] if _test_module(facts) else horovod_calls(facts, "init")
        cached = facts.__dict__["_horovod_init"] = [] if calls and _one_rank(facts, calls) else calls
    return cached


# RDD actions that run a Python function in Spark tasks (`rdd.foreach(train)`)
_SPARK_TASK_ACTIONS = frozenset({"foreach", "foreachPartition", "mapPartitions", "mapPartitionsWithIndex"})
# What runs one model on several GPUs inside one process
_IN_PROCESS_REPLICATION = (".multi_gpu_model", ".MirroredStrategy")


def _one_rank(facts: ModuleFacts, inits: list[CallFact]) -> bool:
    """Whether the code shows its Horovod has one rank: every `hvd.init()` runs in a function that Spark tasks
    run (`rdd.foreach(train)`; Horovod's own `horovod.spark.run` launches ranks, a Spark task does not), or the
    program calls none of Horovod's collectives and spreads its model over the GPUs inside the process
    (`multi_gpu_model`, `MirroredStrategy`): Horovod there only hands out a local rank."""
    in_tasks = {dotted(arg.value) for c in facts.calls if c.attr in _SPARK_TASK_ACTIONS for arg in c.node.args[:1]}
    if all(init.scope.name in in_tasks and init.scope is not facts.module_scope for init in inits):
        return True
    return not wraps_horovod_optimizer(facts) and not horovod_calls(facts, *_COLLECTIVES) and any(
        (name := facts.resolve(c.func)) is not None and name.endswith(_IN_PROCESS_REPLICATION) for c in facts.calls)


def _test_module(facts: ModuleFacts) -> bool:
    """A module of tests (unittest or pytest), which runs Horovod to test it rather than to train."""
    return any(c.name.endswith(("Test", "Tests")) or any(b.endswith(("TestCase", "Tests")) for b in c.bases)
               for c in facts.classes) or any(s.name.startswith("test_") for s in facts.module_scope.children)


def horovod_task_farm(facts: ModuleFacts) -> bool:
    """Whether a Horovod program uses its ranks only to share out independent runs: it calls none of Horovod's
    collectives, and an `if` that gives each rank its share (`if n % hvd.size() == hvd.rank():`) holds training,
    in its body or in the module functions that body calls. Such ranks train models of their own on purpose."""
    def answer() -> bool:
        if horovod_calls(facts, *_COLLECTIVES):
            return False
        trains = {*_TRAINING_LOOP_CALLS, "compile"}
        for fact in facts.if_facts:
            if not any(_rank_share(facts, node) for node in _comparisons(fact.node.test)):
                continue
            inside = [c for c in facts.calls if in_part(fact.node.body, c.statement)]
            reached = facts.transitive_callees(callee for c in inside if (callee := facts.callee(c)))
            if any(c.attr in trains for c in (*inside, *(call for s in reached for call in s.calls))):
                return True
        return False
    return facts.memo("horovod_task_farm", answer)


def _comparisons(test: cst.BaseExpression) -> Iterator[cst.Comparison]:
    """The comparisons of a test, through `and`, `or` and `not`."""
    if isinstance(test, cst.BooleanOperation):
        yield from _comparisons(test.left)
        yield from _comparisons(test.right)
    elif isinstance(test, cst.UnaryOperation):
        yield from _comparisons(test.expression)
    elif isinstance(test, cst.Comparison):
        yield test


def _rank_share(facts: ModuleFacts, test: cst.Comparison) -> bool:
    """`n % hvd.size() == hvd.rank()`, either way round."""
    if len(test.comparisons) != 1 or not isinstance(test.comparisons[0].operator, cst.Equal):
        return False
    sides = (test.left, test.comparisons[0].comparator)
    return any(isinstance(a, cst.BinaryOperation) and isinstance(a.operator, cst.Modulo)
               and _called_member(facts, a.right) == "size" and _called_member(facts, b) == "rank"
               for a, b in (sides, sides[::-1]))


def _called_member(facts: ModuleFacts, node: cst.BaseExpression) -> str | None:
    """`rank` for `hvd.rank()`: the Horovod member a call calls; None for anything else."""
    return horovod_member(facts, node.func) if isinstance(node, cst.Call) else None


def horovod_scope(facts: ModuleFacts, scope: Scope) -> bool:
    """Whether code in `scope` belongs to the Horovod program: the module calls Horovod at its top level, or
    this function (or one around it) calls Horovod or a module function that does (`config()` running
    `hvd.init()`), or is called (three levels up) from one that does.
    Horovod imported inside one function (as Databricks' `HorovodRunner` wants) does not make the module's
    other functions Horovod code. In a Horovod-on-Spark driver (`horovod.spark`), its own code runs once,
    and only the functions it gives `horovod.spark.run` run on every rank."""
    if any(fact.module.startswith("horovod.spark") for fact in facts.imports):
        tasks = facts.memo("spark_tasks", lambda: frozenset(
            dotted(a.value) for c in facts.calls if (facts.resolve(c.func) or "").startswith("horovod.spark.")
            and (c.attr or c.func or "").endswith("run") for a in c.node.args))
        return _reached_from(facts, scope, lambda s: s.is_function and s.name in tasks)
    users = facts.memo("horovod_users", lambda: frozenset(
        id(c.scope) for c in facts.calls if horovod_member(facts, c.func) is not None))
    if id(facts.module_scope) in users:
        return True
    return _reached_from(facts, scope, lambda s: id(s) in users or any(
        id(callee) in users for c in s.calls for callee in facts.callees(c)))


_HOROVOD_FLAG = re.compile(r"horovod|hvd", re.IGNORECASE)


def horovod_off(facts: ModuleFacts, call: CallFact) -> bool:
    """Whether a call lies where a Horovod switch of the program is off: the `else` of `if args.use_horovod:`
    (or the body of `if not args.use_horovod:`), which runs as a single process; or an arm of an `if`/`elif`
    chain whose other arms hold every Horovod call of the module (`elif options.traintumor:` beside `elif
    options.trainhvd:`, the one that calls `hvd.init()`)."""
    if _apart_from_horovod(facts, call):
        return True
    for fact in facts.if_facts:
        on = _horovod_switch(facts, fact.node.test)
        if on is None and fact.node.orelse is not None and _plain_flag(facts, fact.node.test) \
                and _calls_horovod(facts, fact.node.body) and not _calls_horovod(facts, fact.node.orelse):
            on = True  # `if mpi:` whose body alone calls Horovod
        if on is True and fact.node.orelse is not None and in_part(fact.node.orelse, call.statement):
            return True
        if on is False and fact.node in call.ifs and in_part(fact.node.body, call.statement):
            return True
    return False


def _apart_from_horovod(facts: ModuleFacts, call: CallFact) -> bool:
    """Every Horovod call of the module lies in another arm of an `if` chain than the call (the chain around the
    call in its function, or one at the module's top level around the class or function that holds it)."""
    horovod = facts.memo("horovod call facts", lambda: [c for c in facts.calls
                                                       if horovod_member(facts, c.func) is not None])
    chains = [*call.ifs, *(f.node for f in facts.if_facts if f.scope is facts.module_scope)]
    return bool(horovod) and any(
        in_part(own, call.statement) and all(in_part(other, c.statement) for c in horovod)
        for node in chains if node.orelse is not None
        for own, other in ((node.body, node.orelse), (node.orelse, node.body)))


def _horovod_switch(facts: ModuleFacts, test: cst.BaseExpression) -> bool | None:
    """True for a test that is a Horovod switch (`args.use_horovod`, `USE_HVD`), False for its negation, None
    for anything else (a rank test, a call, a compound test)."""
    negated = isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not)
    name = dotted(test.expression if negated else test)  # type: ignore[attr-defined]
    if name is None or facts.resolve(name) is not None or GUARD_WORDS.search(name):
        return None
    return (not negated) if _HOROVOD_FLAG.search(name.split(".")[-1]) else None


def _plain_flag(facts: ModuleFacts, test: cst.BaseExpression) -> bool:
    """A test that is a name or attribute of the program's own (`mpi`, `args.distributed`), not a rank test."""
    name = dotted(test)
    return name is not None and facts.resolve(name) is None and not GUARD_WORDS.search(name)


def _calls_horovod(facts: ModuleFacts, part: cst.CSTNode) -> bool:
    """Whether a part of an `if` calls Horovod (`hvd.callbacks....`, `hvd.rank()`)."""
    return any(horovod_member(facts, call.func) is not None and in_part(part, call.statement) for call in facts.calls)


def _reached_from(facts: ModuleFacts, scope: Scope, holds: Callable[[Scope], bool], depth: int = 0) -> bool:
    """Whether `holds` is true of `scope`, of a function around it, or of one that calls it (three levels
    up)."""
    current: Scope | None = scope
    while current is not None:
        if holds(current):
            return True
        current = current.parent
    return scope.is_function and depth < 3 and any(
        _reached_from(facts, caller.scope, holds, depth + 1) for caller in facts.callers_of(scope))


_DISTRIBUTING_METHODS = RUN_METHODS | DISTRIBUTE_DATASET_METHODS | {"scope"}
DEFAULT_STRATEGY = "tensorflow.distribute.get_strategy"
ONE_DEVICE = frozenset({"tensorflow.distribute.OneDeviceStrategy"})


def distributes(facts: ModuleFacts) -> bool:
    """Whether the module spreads training over devices or processes: it builds a `tf.distribute` strategy,
    calls a strategy's `scope`, `run` or dataset distribution, calls Horovod or `multi_gpu_model` (not in a branch that
    never runs: `if n_gpu > 1:` after `n_gpu = 1`), or builds TF 1 towers.
    A module whose only strategies are `tf.distribute.get_strategy()` or `OneDeviceStrategy` does not: the first is
    the default, one-device strategy unless a caller set another, which the module does not show; the second has
    one replica, always. Nor does a notebook whose saved outputs show its strategy ran with one replica."""
    def answer() -> bool:
        default_only = _made_only_of(facts, ONE_DEVICE | {DEFAULT_STRATEGY}) or bool(idle_strategies(facts)) \
            or ran_on_one_replica(facts)
        return any(
            (not default_only and (facts.is_strategy_constructor(c.node) or (
                c.attr in _DISTRIBUTING_METHODS
                and (facts.is_strategy(c.receiver) or bool(STRATEGY_WORD.search(dotted(c.receiver) or ""))))))
            or (spreads_without_strategy(facts, c) and not facts.never_runs(c))
            or _tower_device(facts, c)
            for c in facts.calls)
    return facts.memo("distributes", answer)


def ran_on_one_replica(facts: ModuleFacts) -> bool:
    """Whether a notebook's saved outputs show a replica count, and every count they show is one (a
    MirroredStrategy that TensorFlow logged over one GPU, a cell that printed `REPLICAS: 1`): as last run, it
    trained on one device."""
    counts = facts.recorded_replicas
    return bool(counts) and all(count == 1 for count in counts)


def strategies_only(facts: ModuleFacts) -> bool:
    """Whether the module builds a `tf.distribute` strategy and spreads training no other way (no Horovod,
    `multi_gpu_model` or TF 1 towers): a Keras model made and fitted outside every scope then trains on one device."""
    return bool(facts.strategy_constructions) and not any(
        spreads_without_strategy(facts, c) or _tower_device(facts, c) for c in facts.calls)


def spreads_without_strategy(facts: ModuleFacts, call: CallFact) -> bool:
    """A Horovod call or `multi_gpu_model`: spreading training with no `tf.distribute` strategy (which standalone
    Keras's `fit` can use too)."""
    return horovod_member(facts, call.func) is not None or (call.func or "").split(".")[-1] == "multi_gpu_model"


def idle_strategies(facts: ModuleFacts) -> tuple[tuple[CallFact, str], ...]:
    """The strategies the module builds, each with the name it is bound to, when every one is only asked its
    replica count: bound to a plain name that the module reads, and only as `name.num_replicas_in_sync` (a
    Kaggle notebook's TPU cell that prints it and scales the batch by it, its model then built and trained
    outside any scope), in a module no other one imports. Such a strategy distributes nothing. Empty otherwise."""
    def answer() -> tuple[tuple[CallFact, str], ...]:
        made: list[tuple[CallFact, str]] = []
        for call in facts.strategy_constructions:
            bound = _bindings(facts, [call])
            if not bound or any(not t.isidentifier() for a in bound for t in a.targets):
                return ()  # returned, passed on, or stored on an object: used where this module does not show
            made.extend((call, t) for a in bound for t in a.targets)
        names = {name for _, name in made}
        read = [n for scope in facts.scopes for n in (
            *(c.func for c in scope.calls if c.func), *(n for c in scope.calls for ns in c.arg_names for n in ns),
            *(n for a in scope.assigns for n in a.names), *(dotted(loop.iter_expr) or "" for loop in scope.loops),
            *(n for r in (*scope.returns, *scope.yields) for n in r.names)) if n.split(".")[0] in names]
        if not read or any(n.partition(".")[2] != "num_replicas_in_sync" for n in read):
            return ()
        imported = facts.loader is not None and bool(facts.loader.consumers(facts))  # asked last: a project search
        return () if imported else tuple(made)
    return facts.memo("idle_strategies", answer)


def _tower_device(facts: ModuleFacts, call: CallFact) -> bool:
    """`tf.device(f"/gpu:{i}")` in a loop, the device following the loop's target: TF 1 towers, one model copy
    per device. One device chosen before the loop (`with tf.device(device):` around each step) is not."""
    device = call_arg(call.node, 0, "device_name") if call.loops else None
    if (device is None or isinstance(device, cst.SimpleString)
            or facts.resolve(call.func) not in ("tensorflow.device", "tensorflow.compat.v1.device")):
        return False
    targets = {t for loop in call.loops for t in loop.targets}
    return bool(targets & derived_names(facts, expression_names(device, strings=False), call.scope, strings=False))


def distributed_program(facts: ModuleFacts) -> bool:
    """Whether the module distributes, or a project module next to it in the imports does: one it imports
    (a base trainer class), one importing it (the training script that calls its loader; through a package's
    `__init__` that re-exports it too), or one that such a script imports (the trainer it hands the loader to).
    A module with a training loop of its own is not distributed by another such module beside it: the script
    that imports both picks one of the two (`model.py` and `model_multi_gpu.py`, each training)."""
    if distributes(facts):
        return True
    near: list[SemanticModel] = list(facts.imported_modules())
    if facts.loader is not None:
        consumers = facts.loader.consumers(facts)
        for package in [c for c in consumers if c.file is not None and c.file.name == "__init__.py"]:
            consumers += facts.loader.consumers(package)  # `from pkg.train import Trainer`, re-exported there
        alone = _trains_alone(facts)
        for consumer in consumers:
            near += [consumer, *(m for m in consumer.imported_modules()
                                 if not (alone and isinstance(m, ModuleFacts) and _trains_alone(m)))]
    return any(isinstance(m, ModuleFacts) and m is not facts and distributes(m) for m in near)


_TRAINING_LOOP_CALLS = ("fit", "fit_generator", "apply_gradients", "minimize", "train_on_batch",
                        "MonitoredTrainingSession", "train_and_evaluate")


def _trains_alone(facts: ModuleFacts) -> bool:
    """Whether the module runs a training loop of its own (fits, applies gradients, or trains an Estimator:
    `estimator.train(input_fn=...)`), not only compiles a model that another module trains."""
    return calls_any(facts, *_TRAINING_LOOP_CALLS) or any(
        c.attr == "train" and call_arg(c.node, None, "input_fn") is not None for c in facts.calls)


Found = TypeVar("Found")


def when_distributed(facts: ModuleFacts, findings: Iterator[Found], run_code: bool) -> Iterator[Found]:
    """A rule's findings in a program that trains on several devices (`distributed_program`), or in the script
    the profile runs, which measures what they cost; on one device that turns on what the code does not show.
    The program is asked only once there is a finding: the question may read the project's other modules."""
    first = next(findings, None)
    if first is None or not (run_code or distributed_program(facts)):
        return
    yield first
    yield from findings


_GRAPH_MODE = frozenset({"tensorflow.compat.v1.disable_eager_execution", "tensorflow.compat.v1.disable_v2_behavior",
                         "tensorflow.disable_eager_execution", "tensorflow.disable_v2_behavior"})


def graph_mode(facts: ModuleFacts) -> bool:
    """Whether the program turns eager execution off (`tf.compat.v1.disable_eager_execution()`), in this module or
    a project module it imports: then Python builds a TF 1 graph and runs nothing eagerly."""
    return any(isinstance(m, ModuleFacts) and any(m.resolve(c.func) in _GRAPH_MODE for c in m.calls)
               for m in (facts, *facts.imported_modules()))


def trains(facts: ModuleFacts) -> bool:
    """Whether the module runs training itself (`fit`, `apply_gradients`, `minimize`, ...), rather than being a
    library or a helper of a training script."""
    return calls_any(facts, "compile") or _trains_alone(facts)


def calls_any(facts: ModuleFacts, *attrs: str) -> bool:
    """Whether the module calls a function or method with one of these last names (`hvd.allreduce`, `x.shard`)."""
    wanted = set(attrs)
    return any((c.attr or (c.func or "").split(".")[-1]) in wanted for c in facts.calls)


# -- multi-worker strategies ---------------------------------------------------------------------------------
def multi_worker_mirrored(facts: ModuleFacts) -> list[CallFact]:
    """Constructions of `MultiWorkerMirroredStrategy` (or TF 1's `CollectiveAllReduceStrategy`), but for one in
    a branch no call takes (`elif mode == "multi_worker":` where `mode` keeps its default: `never_runs`)."""
    cached = facts.__dict__.get("_multi_worker_mirrored")
    if cached is None:
        cached = facts.__dict__["_multi_worker_mirrored"] = [
            c for c in facts.strategy_constructions if facts.resolve(c.func) in MULTI_WORKER_MIRRORED
            and not facts.never_runs(c)
        ]
    return cached


def parameter_server(facts: ModuleFacts) -> list[CallFact]:
    """The `ParameterServerStrategy(...)` constructions of the module."""
    return facts.memo("parameter_server", lambda: [
        c for c in facts.strategy_constructions if facts.resolve(c.func) in PARAMETER_SERVER])


def only_multi_worker(facts: ModuleFacts) -> bool:
    """Whether the module makes strategies and every one is a multi-worker one (MWMS, parameter server)."""
    made = [facts.resolve(c.func) for c in facts.strategy_constructions]
    return bool(made) and all(name in MULTI_WORKER_MIRRORED or name in PARAMETER_SERVER for name in made)


def only_one_device(facts: ModuleFacts) -> bool:
    """Whether the module makes strategies and every one is a `OneDeviceStrategy` (one replica, always)."""
    return _made_only_of(facts, ONE_DEVICE)


_OTHER_STRATEGY = re.compile(r"distribut|strateg|replicator", re.IGNORECASE)


def _made_only_of(facts: ModuleFacts, kinds: frozenset[str]) -> bool:
    """Whether the module makes strategies, every one of these kinds, and the names it binds them to are bound
    to no call of another that names a strategy: `strategy = snt.distribute.Replicator(gpus)` in another branch
    is a strategy too, of a library the linter does not know, and so is `create_distribute_strategy(...)`."""
    made = facts.strategy_constructions
    if not made or any(facts.resolve(c.func) not in kinds for c in made):
        return False
    nodes = {id(c.node) for c in made}
    names = {t for a in _bindings(facts, made) for t in a.targets}
    return not any(isinstance(v, cst.Call) and id(v) not in nodes and _OTHER_STRATEGY.search(dotted(v.func) or "")
                   for a in facts.assigns if names.intersection(a.targets) for v in value_alternatives(a.value))


def _bindings(facts: ModuleFacts, calls: list[CallFact]) -> list[AssignFact]:
    """The assignments that bind what one of these calls makes (also as one side of `a or b`, `x if c else y`)."""
    nodes = {id(c.node) for c in calls}
    return [a for a in facts.assigns if any(id(v) in nodes for v in value_alternatives(a.value))]


def keras3_file_name(call: CallFact) -> bool:
    """Whether a callback is given a file name only Keras 3 accepts (`model.keras`, `x.weights.h5`)."""
    return any((literal_str(a.value) or "").endswith((".keras", ".weights.h5")) for a in call.node.args)


def keras3_callback(facts: ModuleFacts, call: CallFact, keras: Target) -> bool:
    """Whether a Keras callback is certainly Keras 3's, which (unlike Keras 2's under MultiWorkerMirrored-
    Strategy) sends no worker's files elsewhere: a Keras 3 target that is not a guess from the installed or
    newest release (the command line, settings, pins, or Keras 3 APIs in the code) and no `tf_keras` import,
    or a Keras 3 file name (`.keras`, `.weights.h5`) in its arguments."""
    if keras3_file_name(call):
        return True
    chosen = keras.at_least(3) and keras.kind not in ("installed", "newest")
    return chosen and not keras2_imported(facts)


# -- Keras 3 fit under MultiWorkerMirroredStrategy ------------------------------------------------------------
_MULTI_WORKER_MIRRORED_ONLY = frozenset({
    "tensorflow.distribute.MultiWorkerMirroredStrategy",
    "tensorflow.distribute.experimental.MultiWorkerMirroredStrategy",
})
_KERAS_MODEL_MAKERS = re.compile(r"^keras\.(models\.)?(Model|Sequential|load_model|clone_model)$|"
                                 r"^keras\.saving\.load_model$|^keras\.applications\.")
_KERAS_MODEL_CLASS = re.compile(r"^keras\.(models\.)?Model$")


def keras2_imported(model: SemanticModel) -> bool:
    """Whether a module imports Keras 2 by name: `tf_keras` or TensorFlow's private `tensorflow.python.keras`."""
    return any(full.startswith(_KERAS2_ROOTS) for full in model.aliases.values())


def keras_package_imported(model: SemanticModel) -> bool:
    """Whether a module imports the `keras` package by name (`import keras`, `from keras.layers import Dense`):
    standalone Keras under a Keras 2 target, Keras 3 under a Keras 3 one."""
    return any(full == "keras" or full.startswith("keras.") for full in model.aliases.values())


def multi_worker_model_scope(facts: ModuleFacts, call: CallFact) -> WithFact | None:
    """For `model.fit(...)` or `model.evaluate(...)`: the `with strategy.scope():` block of a
    `MultiWorkerMirroredStrategy` in this module where the model was built or compiled. Every value the
    receiver may hold must be a Keras model (`keras.Sequential`, `keras.Model`, `load_model`, a
    `keras.applications` model, or a project class whose base is `keras.Model`) made in such a block (or in a
    function only such blocks call), directly or through a function of this or another project module, or
    else the receiver must be compiled in such a block; None when any value is not shown so (a builder the
    project does not hold, a parameter, a scope of another strategy or of a strategy chosen at run time)."""
    receiver = call.receiver
    if receiver is None:
        return None
    origins = facts.values_of(receiver, call.scope, call.order)
    if not origins:
        return None
    blocks = [_built_in(facts, origin) for origin in origins]
    if all(block is not None for block in blocks):
        return blocks[0]
    return _compiled_in(facts, receiver, call, origins)


def _built_in(facts: ModuleFacts, origin: Origin) -> WithFact | None:
    """The MultiWorkerMirroredStrategy scope block of this module a Keras model was made in."""
    if origin.kind != "value" or not isinstance(origin.expr, cst.Call):
        return None
    model = origin.model
    if not _keras_model_call(model, origin.expr) or keras2_imported(model):
        return None
    made = facts.call_fact(origin.via[0].call) if origin.via else facts.call_fact(origin.expr)
    return None if made is None else _multi_worker_block(facts, made)


def _keras_model_call(model: SemanticModel, node: cst.Call) -> bool:
    """Whether a call makes a Keras model: a Keras constructor or loader, or a class of the project whose base
    is `keras.Model`."""
    if _KERAS_MODEL_MAKERS.match(model.resolve(node.func) or ""):
        return True
    found = model.class_and_module(dotted(node.func))
    return found is not None and any(_KERAS_MODEL_CLASS.match(found[1].resolve(base) or "") for base in found[0].bases)


def _compiled_in(facts: ModuleFacts, receiver: cst.BaseExpression, call: CallFact,
                 origins: list[Origin]) -> WithFact | None:
    """The MultiWorkerMirroredStrategy scope block of this module where the same receiver, holding the same
    values, is compiled before the call (a model from a builder the project does not show)."""
    name = dotted(receiver)
    if name is None or not all(_builder_call(o) for o in origins):
        return None
    wanted = {id(o.expr) for o in origins}
    for compile_call in facts.calls:
        if (compile_call.attr != "compile" or compile_call.scope is not call.scope or compile_call.order > call.order
                or dotted(compile_call.receiver) != name):
            continue
        held = facts.values_of(compile_call.receiver, compile_call.scope, compile_call.order)
        if {id(o.expr) for o in held} != wanted:
            continue
        block = _multi_worker_block(facts, compile_call)
        if block is not None:
            return block
    return None


def _builder_call(origin: Origin) -> bool:
    """Whether a value is what a call of the project's own code, or of Keras, returned (not another library's
    model, such as a Hugging Face one, which may be Keras 2's)."""
    if origin.kind != "value" or not isinstance(origin.expr, cst.Call) or keras2_imported(origin.model):
        return False
    name = origin.model.resolve(origin.expr.func)
    return name is None or name.startswith("keras.")


def _multi_worker_block(facts: ModuleFacts, call: CallFact, depth: int = 0) -> WithFact | None:
    """The `with strategy.scope():` block of a MultiWorkerMirroredStrategy a call runs in: the innermost scope
    block around it, or, in a function, the block around every call of that function (three levels up); None
    when there is none, when any is another strategy's, or when the function is also called outside one."""
    blocks = {id(b) for b in facts.scope_blocks}
    around = [w for w in call.withs if id(w) in blocks]
    if around:
        return around[-1] if _multi_worker_scope(facts, around[-1]) else None
    if not call.scope.is_function or depth >= 3:
        return None
    callers = facts.callers_of(call.scope)
    found = [_multi_worker_block(facts, caller, depth + 1) for caller in callers]
    return found[0] if found and all(block is not None for block in found) else None


def _multi_worker_scope(facts: ModuleFacts, block: WithFact) -> bool:
    """Whether a `with strategy.scope():` block is the scope of a `MultiWorkerMirroredStrategy` (also
    `tf.distribute.experimental`'s): every value the strategy may hold is one made by that constructor."""
    def check() -> bool:
        for entered in block.items:
            item = facts.strategy_scope_call(entered, block.scope)
            if item is None or not isinstance(item.func, cst.Attribute):
                continue
            fact = facts.call_fact(item)
            strategy = item.func.value
            where, order = (fact.scope, fact.order) if fact is not None else (block.scope, END_OF_SCOPE)
            origins = facts.values_of(strategy, where, order)
            if origins and all(o.kind == "value" and isinstance(o.expr, cst.Call)
                               and o.model.resolve(o.expr.func) in _MULTI_WORKER_MIRRORED_ONLY for o in origins):
                return True
        return False
    return facts.memo(("multi_worker_scope", id(block)), check)


# -- expressions ---------------------------------------------------------------------------------------------
def expression_names(expr: cst.CSTNode | None, strings: bool = True, depth: int = 0) -> frozenset[str]:
    """Name chains, called functions and (with `strings`) string literals in a short expression (a test, a
    path, a learning rate). Bounded to expression nodes: this is not a walk of the module."""
    if expr is None or depth > 12:
        return frozenset()
    name = dotted(expr)
    if name is not None:
        return frozenset({name})
    parts: list[cst.CSTNode | None] = []
    if isinstance(expr, cst.Call):
        parts = [expr.func, *(a.value for a in expr.args)]
    elif isinstance(expr, cst.Attribute):
        parts = [expr.value]
    elif isinstance(expr, cst.Comparison):
        parts = [expr.left, *(c.comparator for c in expr.comparisons)]
    elif isinstance(expr, (cst.BooleanOperation, cst.BinaryOperation)):
        parts = [expr.left, expr.right]
    elif isinstance(expr, cst.UnaryOperation):
        parts = [expr.expression]
    elif isinstance(expr, cst.IfExp):
        parts = [expr.test, expr.body, expr.orelse]
    elif isinstance(expr, cst.Subscript):  # `x[i]`, and `x[hvd.rank()::hvd.size()]`
        parts = [expr.value, *(part for e in expr.slice for part in (
            (e.slice.value,) if isinstance(e.slice, cst.Index) else (e.slice.lower, e.slice.upper, e.slice.step)))]
    elif isinstance(expr, (cst.Tuple, cst.List, cst.Set)):
        parts = [e.value for e in expr.elements]
    elif isinstance(expr, cst.FormattedString):
        parts = [p.expression for p in expr.parts if isinstance(p, cst.FormattedStringExpression)]
    elif isinstance(expr, cst.ConcatenatedString):
        parts = [expr.left, expr.right]
    elif isinstance(expr, cst.SimpleString):
        text = literal_str(expr)
        return frozenset({text}) if strings and text is not None else frozenset()
    return frozenset().union(*(expression_names(p, strings, depth + 1) for p in parts))


def derived_names(facts: ModuleFacts, names: Iterable[str], scope: Scope, strings: bool = True,
                  depth: int = 0) -> frozenset[str]:
    """The names and, through their assignments in this module (three levels), the names they come from."""
    start = frozenset(names)
    if depth > 2:
        return start
    return facts.memo(("derived_names", start, id(scope), strings, depth),
                      lambda: _derived_names(facts, start, scope, strings, depth))


def _derived_names(facts: ModuleFacts, names: frozenset[str], scope: Scope, strings: bool,
                   depth: int) -> frozenset[str]:
    found = set(names)
    for name in list(found):
        if not name.replace(".", "").isidentifier():
            continue
        for assign in bindings(facts, name, scope) or ():
            found |= derived_names(facts, assign.names | expression_names(assign.value, strings), assign.scope,
                                   strings, depth + 1)
        for argument, caller in parameter_arguments(facts, name, scope) or ():
            found |= derived_names(facts, expression_names(argument, strings), caller, strings, depth + 1)
    return frozenset(found)


def mentions_worker_count(facts: ModuleFacts, expr: cst.CSTNode | None, scope: Scope) -> bool:
    """Whether an expression is computed from the number of workers (`hvd.size()`, `num_workers`, ...)."""
    return any(_WORKER_COUNT.search(n) for n in derived_names(facts, expression_names(expr), scope))


def unknown_value(facts: ModuleFacts, expr: cst.CSTNode | None, scope: Scope, depth: int = 0) -> bool:
    """Whether an expression reads a name the module cannot explain: a function parameter (set by the caller),
    a name assigned nowhere that is not an attribute of an import or of an argument parser's result, or the
    result of a function or class that is not TensorFlow's, Keras's or a builtin (a project's schedule)."""
    if isinstance(expr, cst.Call) and depth < 4:
        resolved = facts.resolve(expr.func) or ""
        if not resolved.startswith(("tensorflow.", "keras.", "numpy.", "math.")) and dotted(expr.func) not in _PLAIN:
            return True
    name_of = dotted(expr) if isinstance(expr, cst.BaseExpression) else None
    if name_of is not None and depth < 4:
        for assign in bindings(facts, name_of, scope) or ():
            if assign.operator == "=" and unknown_value(facts, assign.value, assign.scope, depth + 1):
                return True
    for name in expression_names(expr):
        head = name.split(".")[0]
        if head in facts.aliases or not head.isidentifier():
            continue
        if bindings(facts, head, scope) is None:  # a parameter: known only if every caller's argument is
            arguments = parameter_arguments(facts, head, scope) if depth < 4 else None
            if arguments is None or any(unknown_value(facts, a, s, depth + 1) for a, s in arguments):
                return True
        elif not bindings(facts, name, scope) and "." not in name:
            return True
    return False


def parameter_arguments(facts: ModuleFacts, name: str, scope: Scope) -> list[tuple[cst.BaseExpression, Scope]] | None:
    """For a parameter of the function `scope` (or of one around it), the argument every call site of that
    function in this module gives it, with the caller's scope; None when it is not a parameter, the function
    is never called here, or a call site does not give it (a default, `**kwargs`)."""
    current = _parameter_owner(name, scope)
    if current is None or name not in current.value_params():
        return None
    callers = facts.callers_of(current)
    index = current.value_params().index(name)
    found = []
    for caller in callers:
        argument = call_arg(caller.node, index, name)
        if argument is None or any(a.star for a in caller.node.args):
            return None
        found.append((argument, caller.scope))
    return found or None


def path_from_outside(facts: ModuleFacts, call: CallFact) -> bool:
    """Whether a write's target comes from a parameter of a function this module never calls: its caller in
    another module chooses it (per worker, or none on the other workers)."""
    names = derived_names(facts, frozenset().union(*(expression_names(a.value, strings=False) for a in call.node.args)),
                          call.scope, strings=False)  # `summary_dir = os.path.join(save_dir, ...)` too
    return any(_given_from_outside(facts, name.split(".")[0], call.scope) for name in names)


def _given_from_outside(facts: ModuleFacts, name: str, scope: Scope) -> bool:
    """Whether `name` is a parameter of a function around `scope` that this module never calls."""
    owner = _parameter_owner(name, scope)
    return owner is not None and not facts.callers_of(owner)


def _parameter_owner(name: str, scope: Scope) -> Scope | None:
    """The function around `scope` whose parameter `name` is (None: assigned first, or no such function)."""
    current: Scope | None = scope
    while current is not None and name not in current.params:
        if current.assignments_of(name):
            return None
        current = current.parent
    return current if current is not None and current.is_function else None


def bindings(facts: ModuleFacts, name: str, scope: Scope) -> list[AssignFact] | None:
    """The assignments `name` (or `self.x`) refers to from `scope`, innermost first; None when the name is a
    parameter of a nearer function (its value comes from the caller), which shadows any outer assignment."""
    if name.startswith("self."):
        return facts.definitions(name, scope)
    head = name.split(".")[0]
    current: Scope | None = scope
    while current is not None:
        assigned = current.assignments_of(name)
        if assigned:
            return assigned
        if head in current.params:
            return None
        current = current.parent
    return []


# -- who runs this code --------------------------------------------------------------------------------------
def _scope_text(facts: ModuleFacts, function: Scope) -> str:
    """The source of a function (a helper such as `_is_chief`, here or in a module this one imports), rendered
    once."""
    texts = facts.__dict__.setdefault("_multiworker_texts", {})
    if id(function) not in texts:
        texts[id(function)] = function.owner.module.code_for_node(function.node)
    return texts[id(function)]


def guard_test(facts: ModuleFacts, test: cst.BaseExpression, scope: Scope) -> bool:
    """Whether an `if` test decides by worker: task type/id, the chief, a rank, or a module function whose
    name or result says so (`_is_chief(...)`, `def should_save(): return hvd.rank() == 0`)."""
    return _guard_names(facts, expression_names(test), scope)


def _guard_names(facts: ModuleFacts, read: Iterable[str], scope: Scope) -> bool:
    names = derived_names(facts, read, scope)
    if any(GUARD_WORDS.search(n) for n in names):
        return True
    for name in names:
        for function in _functions_called(facts, name, scope):
            if GUARD_WORDS.search(_scope_text(facts, function)):
                return True
    return False


def _functions_called(facts: ModuleFacts, name: str, scope: Scope) -> list[Scope]:
    """The function a name read in a test calls: a module function, a method of this class
    (`self.is_eval_task`), or a project module's function (`from utils import get_verbosity`)."""
    return [f for f in facts.named_callables(name, scope) if isinstance(f.node, cst.FunctionDef)]


def apart_from_multi_worker(facts: ModuleFacts, call: CallFact) -> bool:
    """Whether a call never runs where the module's `MultiWorkerMirroredStrategy` is made: in an `if` body that
    excludes every construction's own (`if flags.strategy is None:` beside `elif flags.strategy ==
    "multi_worker_mirrored":`), or after an `if` that exits unless it is excluded (`if flags.strategy is not
    None: raise`), or in a method of a base class that every class making the strategy overrides
    without calling it (a TPU executer's `train_and_eval`, replaced by the multi-worker executer's)."""
    made = multi_worker_mirrored(facts)
    exits = [f.node for f in facts.if_facts if f.scope is call.scope and f.order < call.order
             and f.node not in call.ifs and _ends_flow(f.node.body)]  # what the flow passed to reach the call
    if made and all(c.scope is call.scope and (any(exclusive(x, y) for x in c.ifs for y in call.ifs)
                                               or any(excluded_after(x, y) for x in exits for y in c.ifs))
                    for c in made):
        return True
    method = _method_around(call.scope)
    if method is None or not made:
        return False
    base = method.class_name
    for construction in made:
        maker = _method_around(construction.scope)
        if maker is None or maker.class_name == base or not _inherits(facts, maker.class_name, base):
            return False
        own = facts.class_named(maker.class_name).methods.get(method.name)  # type: ignore[union-attr]
        if own is None or "super(" in _scope_text(facts, own) or f"{base}.{method.name}" in _scope_text(facts, own):
            return False
    return True


def _method_around(scope: Scope | None) -> Scope | None:
    """The method of a class (this module's) a scope is in, or None."""
    while scope is not None and scope.class_name is None:
        scope = scope.parent
    return scope


def _inherits(facts: ModuleFacts, name: str | None, base: str | None, depth: int = 0) -> bool:
    """Whether class `name` of this module derives from class `base` (through classes defined here)."""
    found = facts.class_named(name) if name else None
    if found is None or base is None or depth > 4:
        return False
    return base in found.bases or any(_inherits(facts, b, base, depth + 1) for b in found.bases)


def runs_on_one_worker(facts: ModuleFacts, call: CallFact, depth: int = 0,
                       one_process: Callable[[ModuleFacts, CallFact], bool] = lambda facts, call: False) -> bool:
    """True when a call may run on one worker only, or its target may differ per worker: under an `if` that
    decides by worker, in a statement or function that tests a worker's identity, with a path built from
    the worker's identity or a temporary directory, where `one_process` says the program runs as one process
    (Horovod's switch off), or in a function whose every caller is one of these. Precision first: True
    whenever the module leaves it open."""
    if one_process(facts, call) or any(guard_test(facts, branch.test, call.scope) for branch in call.ifs):
        return True
    if GUARD_WORDS.search(facts.module.code_for_node(call.statement)):
        return True
    written = _written(call)
    written.extend(_with_items(call, frozenset().union(*(expression_names(v, strings=False) for v in written))))
    path_names = derived_names(facts, frozenset().union(*(expression_names(value, strings=False)
                                                          for value in written)), call.scope, strings=False)
    if any(_PER_WORKER_PATH.search(n) for n in path_names):
        return True
    for name in path_names:  # a path made by a module function that knows the worker
        function = facts.function_named(name.split(".")[-1], call.scope) if "." not in name else None
        if function is not None and (GUARD_WORDS.search(_scope_text(facts, function))
                                     or _PER_WORKER_PATH.search(_scope_text(facts, function))):
            return True
    scope: Scope | None = call.scope
    while scope is not None:  # an early `if not is_chief: return` in the function, or around it
        if any(fact.scope is scope and _leaves(fact.node) and _guard_names(facts, fact.names, scope)
               and (scope is not call.scope or fact.order < call.order) for fact in facts.if_facts):
            return True
        scope = scope.parent
    if call.scope.is_function and depth < 3:
        callers = facts.callers_of(call.scope)
        if callers and all(runs_on_one_worker(facts, c, depth + 1, one_process) for c in callers):
            return True
        if not callers and call.scope.class_name and (
                _callback_of_one_process(facts, call.scope.class_name, one_process)
                or _made_on_one_worker(facts, call.scope.class_name, depth, one_process)):
            return True
    return False


def _made_on_one_worker(facts: ModuleFacts, class_name: str, depth: int,
                        one_process: Callable[[ModuleFacts, CallFact], bool]) -> bool:
    """A class whose every mention is a construction in its module, each of which runs on one worker only (`if
    hvd.rank() == 0: callbacks.append(SaveCallback(...))`), and that no module importing this one names: its
    methods run there only."""
    made = [c for c in facts.calls if c.func == class_name]
    if not made or not facts.named_only_in_calls(class_name):
        return False
    mention = re.compile(rf"\b{re.escape(class_name)}\b")
    importers = facts.loader.consumers(facts) if facts.loader is not None else []
    return not any(mention.search("\n".join(m.source_lines)) for m in importers) \
        and all(runs_on_one_worker(facts, c, depth + 1, one_process) for c in made)


def _callback_of_one_process(facts: ModuleFacts, class_name: str,
                             one_process: Callable[[ModuleFacts, CallFact], bool]) -> bool:
    """A callback class of the module whose instances go only to `fit` calls that run as one process (`callbacks
    = [tensorboard, callbacksave]` in the `else` of the Horovod switch): Keras runs its methods there only."""
    fed = []
    for fit in facts.method_calls("fit", "fit_generator"):
        given = fit_callbacks(facts, fit)
        if given is None:
            return False  # callbacks the module does not show: an instance may go there
        values = [o.expr for g in given for o in (facts.values_of(g, fit.scope, fit.order) if dotted(g) else ())]
        if any(isinstance(v, cst.Call) and dotted(v.func) == class_name for v in [*given, *values]):
            fed.append(fit)
    return bool(fed) and all(one_process(facts, fit) for fit in fed)


_SHARED_STORAGE = re.compile(r"^(gs|gcs|s3|s3a|hdfs|viewfs|abfs|abfss|az|wasbs?|oss|cos|obs)://|^/dbfs/", re.IGNORECASE)


def on_shared_storage(facts: ModuleFacts, call: CallFact) -> bool:
    """Whether a write's path is certainly on storage every worker sees: a cloud or HDFS URL (`gs://`, `s3://`,
    `hdfs://`, ...) in the strings it is built from. A relative or local path is one file per host."""
    return any(_SHARED_STORAGE.search(text) for text in _path_strings(facts, call))


def in_host_scratch(facts: ModuleFacts, call: CallFact) -> bool:
    """Whether a write's path is under `/tmp`: the scratch space of the host (or container) it runs on, never
    storage the workers share."""
    return any(_HOST_SCRATCH.search(text) for text in _path_strings(facts, call))


def _path_strings(facts: ModuleFacts, call: CallFact) -> frozenset[str]:
    """The names and strings a write's path is built from."""
    written = _written(call)
    return derived_names(facts, frozenset().union(*(expression_names(v) for v in written)), call.scope)


_HOST_SCRATCH = re.compile(r"^/tmp(/|$)")


def _written(call: CallFact) -> list[cst.BaseExpression]:
    """What a write's path is made from: its arguments, and its receiver when no argument is positional
    (`manager.save(checkpoint_number=step)` writes to the manager's directory)."""
    written = [a.value for a in call.node.args]
    if call.receiver is not None and all(a.keyword is not None for a in call.node.args):
        written.append(call.receiver)
    return written


def worker_guard(facts: ModuleFacts, call: CallFact) -> cst.If | None:
    """The innermost `if` around a call whose test decides by worker (`if is_chief:`, `if task_id == 0:`),
    with the call in its body."""
    return next((branch for branch in reversed(call.ifs) if guard_test(facts, branch.test, call.scope)), None)


def saves_beside(facts: ModuleFacts, call: CallFact, guard: cst.If) -> bool:
    """Whether the workers that skip `guard` save too: a model or checkpoint write in its `else` (a save on
    every worker beside the `if` leaves the chief with one collective more than the others)."""
    return guard.orelse is not None and any(
        other is not call and in_part(guard.orelse, other.statement)
        and write_kind(facts, other) in ("model", "checkpoint") for other in call.scope.calls)


def saved_under_strategy(facts: ModuleFacts, call: CallFact) -> bool:
    """Whether what a model save writes was built inside `strategy.scope()`: the receiver of `model.save`, or
    the first argument of `tf.saved_model.save(model, ...)`, made by a call in the scope (a model loaded
    afresh outside it is not distributed). A checkpoint object holds whatever it was given: True."""
    if write_kind(facts, call) == "checkpoint":
        return True
    saved = call.receiver if call.attr in ("save", "save_weights") else call_arg(call.node, 0, "obj")
    if saved is None:
        return False
    for origin in facts.values_of(saved, call.scope, call.order):
        made = facts.call_fact(origin.expr) if origin.kind == "value" else None
        if made is not None and facts.in_strategy_scope(made.scope, made.withs):
            return True
    return False


_SYNC_ON_READ_KERAS2 = re.compile(r"\bBatchNormalization\b")
_SYNC_ON_READ = re.compile(r"VariableSynchronization\.ON_READ|synchronization=[\"']on_read")
_APPLICATIONS_WITH_BN = re.compile(r"^keras\.applications\.(?!vgg|VGG)")


def sync_on_read_state(facts: ModuleFacts, keras2: bool) -> str | None:
    """What in the module makes saving read sync-on-read variables (a collective across workers under
    `MultiWorkerMirroredStrategy`): "batch-norm" for Keras 2's `BatchNormalization` layers, built here or in
    a `keras.applications` model other than VGG; "sync-on-read" for variables made with
    `VariableSynchronization.ON_READ`; None when the module shows neither."""
    text = "".join(facts.source_lines)
    if _SYNC_ON_READ.search(text):
        return "sync-on-read"
    if keras2 and (_SYNC_ON_READ_KERAS2.search(text) or any(
            _APPLICATIONS_WITH_BN.match(facts.resolve(c.func) or "") for c in facts.calls)):
        return "batch-norm"
    return None


def keras2_code(facts: ModuleFacts, keras: Target) -> bool:
    """Whether the module's Keras is Keras 2: a Keras 2 target, or `tf_keras` imported."""
    return keras.below(3) or keras2_imported(facts)


def keras3_unknown(facts: ModuleFacts, keras: Target, run_code: bool) -> bool:
    """Whether a claim that holds only under Keras 3 cannot be made: the module is Keras 2 code, or nothing
    says it is Keras 3 (the installed or newest release is a guess), unless the run meets the installed one."""
    return keras2_code(facts, keras) or keras.guessed and not run_code


def _with_items(call: CallFact, names: frozenset[str]) -> list[cst.BaseExpression]:
    """What the `with` statements around a call bind to these names (`with h5py.File(buffer) as f`)."""
    return [item.item for fact in call.withs for item in fact.node.items
            if item.asname is not None and isinstance(item.asname.name, cst.Name)
            and item.asname.name.value in names]


def _leaves(branch: cst.If) -> bool:
    """Whether an `if` may end its function or loop iteration: a branch of it ends in `return`, `raise`,
    `continue`, `break` or an exit (`if hvd.rank() != 0: return`). An `if hvd.rank() == 0:` that only
    restores a checkpoint leaves what follows it to every worker."""
    branches: list[cst.BaseSuite] = [branch.body]
    other = branch.orelse
    while other is not None:
        branches.append(other.body)
        other = other.orelse if isinstance(other, cst.If) else None
    return any(_ends_flow(suite) for suite in branches)


def _ends_flow(suite: cst.BaseSuite) -> bool:
    body = suite.body
    if not body:
        return False
    last = body[-1]
    statements = last.body if isinstance(last, cst.SimpleStatementLine) else (last,)
    for statement in statements:
        if isinstance(statement, (cst.Return, cst.Raise, cst.Continue, cst.Break)):
            return True
        if isinstance(statement, cst.Expr) and isinstance(statement.value, cst.Call) and \
                (dotted(statement.value.func) or "").split(".")[-1] in ("exit", "_exit", "quit"):
            return True
    return isinstance(last, cst.If) and _leaves(last)


# -- writes --------------------------------------------------------------------------------------------------
def write_kind(facts: ModuleFacts, call: CallFact) -> str | None:
    """What a call writes to storage: "model" (`model.save`, `save_weights`, `save_pretrained`, `tf.saved_model.save`),
    "checkpoint" (`checkpoint.save`, `manager.save()`), "callback" (`ModelCheckpoint`, `TensorBoard`), "summary"
    (`tf.summary.create_file_writer`); None for anything else."""
    resolved = facts.resolve(call.func)
    if resolved is not None:
        last = resolved.split(".")[-1]
        if resolved in _SAVE_FUNCTIONS:
            return "model"
        if resolved in _SUMMARY_WRITERS:
            return "summary"
        if resolved.startswith("keras.") and ".callbacks." in resolved and last in _CALLBACK_WRITERS:
            return None if _never_used(facts, call) or _kept_from_some_workers(facts, call) else "callback"
        return None
    if call.attr not in ("save", "save_weights", "save_pretrained"):  # `save_pretrained`: Hugging Face models
        return None
    receiver = dotted(call.receiver)
    if receiver is None or facts.resolve(receiver) is not None:
        return None
    if not _SAVE_RECEIVER.search(receiver.split(".")[-1]):
        return None
    if call.attr == "save" and not call.node.args:
        return "checkpoint" if re.search(r"manager", receiver, re.IGNORECASE) else None
    return "checkpoint" if re.search(r"ckpt|checkpoint|manager|saver", receiver, re.IGNORECASE) else "model"


def _never_used(facts: ModuleFacts, call: CallFact) -> bool:
    """Whether a call's result is bound to one name that nothing in its function reads again."""
    targets = [a.targets for a in call.scope.assigns if a.value is call.node]
    if len(targets) != 1 or len(targets[0]) != 1:
        return False
    var = targets[0][0]
    stack = [call.scope]
    while stack:
        scope = stack.pop()
        stack.extend(scope.children)
        if (any(reads(n, var) for c in scope.calls for n in c.arg_names)
                or any(reads({c.func}, var) for c in scope.calls if c.func)
                or any(reads(a.names, var) for a in scope.assigns)
                or any(reads(r.names, var) for r in (*scope.returns, *scope.yields))):
            return False
    return True


def _kept_from_some_workers(facts: ModuleFacts, call: CallFact) -> bool:
    """Whether a callback reaches none of the module's `fit` calls on every worker, and the module shows all
    their callbacks: made everywhere, but added under `if hvd.rank() == 0:` (or not at all)."""
    fits = [c for c in facts.calls if c.attr in ("fit", "fit_generator")]
    given: list[cst.BaseExpression] = []
    for fit in fits:
        elements = fit_callbacks(facts, fit)
        if elements is None:
            return False
        given.extend(elements)
    names = {target for assign in call.scope.assigns if assign.value is call.node for target in assign.targets}
    return bool(fits) and not any(element is call.node or dotted(element) in names for element in given)


# -- Keras callbacks -----------------------------------------------------------------------------------------
# Keyword arguments of Keras' `fit` and `fit_generator` (Keras 2 and 3): a `fit` given another is some other
# library's (`trainer.fit(module=..., train_dataset=...)`), whose callbacks the module does not show
_KERAS_FIT_KEYWORDS = frozenset({
    "x", "y", "batch_size", "epochs", "verbose", "callbacks", "validation_split", "validation_data", "shuffle",
    "class_weight", "sample_weight", "initial_epoch", "steps_per_epoch", "validation_steps",
    "validation_batch_size", "validation_freq", "max_queue_size", "workers", "use_multiprocessing", "generator"})


def fit_callbacks(facts: ModuleFacts, fit: CallFact) -> list[cst.BaseExpression] | None:
    """The callbacks a `fit` call receives on every worker, when the module shows all of them: list literals,
    `+`, names bound to lists and grown with `append`/`extend`/`insert`/`+=` (an `append` under a test of the
    rank or the chief is not on every worker). None when any part is unknown, or when the call is not Keras'
    `fit` (a keyword Keras' does not take)."""
    if any(a.keyword is not None and a.keyword.value not in _KERAS_FIT_KEYWORDS for a in fit.node.args):
        return None
    return call_list(facts, fit, "callbacks", None, 5)


def call_list(facts: ModuleFacts, call: CallFact, keyword: str, index: int | None,
              max_positional: int) -> list[cst.BaseExpression] | None:
    """The elements of a list argument (`fit(callbacks=...)`, `MonitoredTrainingSession(hooks=...)`) on every
    worker, when the module shows all of them (see `fit_callbacks`): [] when the call does not give it, None
    when any part is unknown or more than `max_positional` positional arguments may hold it."""
    if any(a.star for a in call.node.args):
        return None
    value = call_arg(call.node, index, keyword)
    if value is None:
        positional = [a for a in call.node.args if a.keyword is None]
        return None if len(positional) > max_positional else []
    return _list_elements(facts, value, call.scope, call.order, 0)


def _list_elements(facts: ModuleFacts, expr: cst.BaseExpression, scope: Scope, before: int,
                   depth: int) -> list[cst.BaseExpression] | None:
    if depth > 4:
        return None
    if isinstance(expr, (cst.List, cst.Tuple)):
        elements: list[cst.BaseExpression] = []
        for element in expr.elements:
            if isinstance(element, cst.StarredElement):
                inner = _list_elements(facts, element.value, scope, before, depth + 1)
                if inner is None:
                    return None
                elements.extend(inner)
            else:
                elements.append(element.value)
        return elements
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Add):
        left = _list_elements(facts, expr.left, scope, before, depth + 1)
        right = _list_elements(facts, expr.right, scope, before, depth + 1)
        return None if left is None or right is None else left + right
    if isinstance(expr, cst.Name) and expr.value == "None":
        return []
    if isinstance(expr, cst.IfExp):
        body = _list_elements(facts, expr.body, scope, before, depth + 1)
        orelse = _list_elements(facts, expr.orelse, scope, before, depth + 1)
        if body is None or orelse is None:
            return None
        if not guard_test(facts, expr.test, scope):
            return body + orelse
        common = {facts.module.code_for_node(e) for e in orelse}  # chosen by rank: only what both branches give
        return [e for e in body if facts.module.code_for_node(e) in common]
    name = dotted(expr)
    if name is None:
        return None
    assigned = facts.definitions(name, scope, before)
    bound = [a for a in assigned if a.operator == "="]
    if not assigned or (len(bound) > 1 and any(a.blocks for a in bound)):
        return None  # bound one way or another (`if has_horovod(): ... else: ...`): not one list
    elements = []
    for assign in assigned:
        if assign.operator == "=":
            found = _list_elements(facts, assign.value, assign.scope, assign.order, depth + 1)
        elif assign.operator == "AddAssign":
            found = _list_elements(facts, assign.value, assign.scope, assign.order, depth + 1)
        else:
            found = None
        if found is None:
            return None
        elements = found if assign.operator == "=" else elements + found
    for call in facts.calls:
        if call.func in (f"{name}.append", f"{name}.insert", f"{name}.extend") and call.node.args:
            if any(guard_test(facts, branch.test, call.scope) for branch in call.ifs):
                continue
            item = call.node.args[-1].value
            if call.attr == "extend":
                grown = _list_elements(facts, item, call.scope, call.order, depth + 1)
                if grown is None:
                    return None
                elements.extend(grown)
            else:
                elements.append(item)
    return elements


def callback_is(facts: ModuleFacts, expr: cst.BaseExpression, scope: Scope, member: str) -> bool | None:
    """Whether a callback expression is the Horovod callback `member` on every worker (True), certainly not
    (False: another callback, or one chosen by rank), or the module cannot tell (None: made by an unknown
    function, or a parameter)."""
    if isinstance(expr, cst.Call):
        found = horovod_member(facts, expr.func)
        if found is not None:
            return found.split(".")[-1] == member
        resolved = facts.resolve(expr.func)
        if resolved is not None and member.split(".")[-1] in resolved.split(".")[-1]:
            return None  # another library's subclass of it (TFRA's `DEHvdBroadcastGlobalVariablesCallback`)
        return False if resolved is not None or facts.class_named(dotted(expr.func) or "") else None
    if isinstance(expr, cst.IfExp):
        if guard_test(facts, expr.test, scope):
            return False
        branches = [callback_is(facts, e, scope, member) for e in (expr.body, expr.orelse)]
        return True if True in branches else (None if None in branches else False)
    name = dotted(expr)
    if name is None:
        return None
    assigned = facts.definitions(name, scope)
    if not assigned:
        return None
    results = [callback_is(facts, a.value, a.scope, member) for a in assigned]
    return True if True in results else (None if None in results else False)


# -- Horovod: learning rates, seeds and broadcasts -----------------------------------------------------------
_OPTIMIZER_MODULES = ("keras.optimizers.", "tensorflow.optimizers.", "tensorflow.train.")
_OPTIMIZER_CLASS = re.compile(r"Optimizer$|^(SGD|Adam|AdamW|Adamax|Nadam|RMSprop|Adagrad|Adadelta|Ftrl|Lion|Lamb)$")
# Ways to give every rank rank 0's variables other than the Keras callback (TF 1 hooks, elastic state, one
# tensor at a time), and a callback's hooks run by hand outside `fit`.
_BROADCASTS = ("broadcast_variables", "broadcast_global_variables", "BroadcastGlobalVariablesHook", "broadcast",
               "broadcast_object", "broadcast_object_fn")
# Horovod's collectives: what a program calls when its ranks train one model together
_COLLECTIVES = frozenset({"DistributedOptimizer", "DistributedGradientTape", "PartialDistributedGradientTape",
                          "DistributedTrainer", "DistributedOptimizerWrapper", "allreduce", "grouped_allreduce",
                          "allgather", "alltoall", "reducescatter", "BroadcastGlobalVariablesCallback",
                          "MetricAverageCallback", *_BROADCASTS})
_CALLBACK_HOOKS = ("on_train_begin", "on_train_batch_begin", "on_train_batch_end", "on_batch_begin", "on_batch_end",
                   "on_epoch_begin", "CallbackList")
_LIST_GROWTH = frozenset({"append", "extend", "insert"})
_INSPECTING = frozenset({"len", "print", "isinstance", "str", "repr", "type"})


def optimizer_learning_rate(facts: ModuleFacts, call: CallFact) -> cst.BaseExpression | None:
    """The learning rate given to a Keras or TensorFlow optimizer's constructor (`SGD(0.1)`,
    `tf.train.AdamOptimizer(learning_rate=lr)`, `Adadelta(lr=...)`); None for any other call."""
    name = facts.resolve(call.func) or ""
    last = name.split(".")[-1]
    if not name.startswith(_OPTIMIZER_MODULES) or not last[:1].isupper() or not _OPTIMIZER_CLASS.search(last) \
            or "LossScale" in name:
        return None
    return call_arg(call.node, 0, "learning_rate") or call_arg(call.node, None, "lr")


def broadcasts_otherwise(facts: ModuleFacts) -> bool:
    """Whether the module gives every rank rank 0's variables by a means other than the Keras broadcast
    callback (see `broadcast_calls`)."""
    return bool(broadcast_calls(facts))


def broadcast_calls(facts: ModuleFacts) -> list[CallFact]:
    """The calls that give every rank rank 0's variables, other than the Keras broadcast callback:
    `hvd.broadcast_variables`, TF 1's `broadcast_global_variables` or its hook, `hvd.broadcast`, elastic
    state, or a callback's hooks run by hand."""
    wanted = frozenset((*_BROADCASTS, *_CALLBACK_HOOKS))
    return [c for c in facts.calls if (c.attr or (c.func or "").split(".")[-1]) in wanted
            or (member := horovod_member(facts, c.func) or "").split(".")[-1] in _BROADCASTS
            or member.startswith("elastic.")]


def same_start_everywhere(facts: ModuleFacts) -> bool:
    """Whether every rank may start from the same weights without a broadcast: the module sets TensorFlow's
    (or Keras's) global seed to a value that does not depend on the rank, or restores a checkpoint or weights
    outside any `if`."""
    for call in facts.calls:
        name = facts.resolve(call.func) or ""
        if name.startswith(("tensorflow.", "keras.")) and name.endswith(("set_random_seed", ".set_seed")):
            read = frozenset().union(*call.arg_names) if call.arg_names else frozenset()
            if call.node.args and not any(GUARD_WORDS.search(n) for n in derived_names(facts, read, call.scope)):
                return True
        elif call.attr in ("restore", "load_weights") and not call.ifs and facts.resolve(call.func) is None:
            return True
    return False


def escapes(facts: ModuleFacts, call: CallFact) -> bool:
    """Whether what a call makes may be used where the module does not show it: bound to an attribute,
    returned or yielded, or given (itself, or in a list that holds it) to any call but a list's `append`,
    `extend` or `insert` and builtins that only look at it (`len`, `print`). A callback that does not escape is only ever in this module's lists."""
    holders: set[str] = set()
    for _ in range(4):
        before = len(holders)
        for assign in facts.assigns:
            if _holds(assign.value, call.node, holders):
                if any("." in target for target in assign.targets):
                    return True
                holders.update(assign.targets)
        for other in facts.calls:
            for argument in other.node.args:
                if other.node is not call.node and _holds(argument.value, call.node, holders):
                    receiver = dotted(other.receiver)
                    if other.func in _INSPECTING:
                        continue
                    if other.attr not in _LIST_GROWTH or receiver is None or "." in receiver:
                        return True
                    holders.add(receiver)
        if len(holders) == before:
            break
    stack = [facts.module_scope]
    while stack:
        scope = stack.pop()
        stack.extend(scope.children)
        if any(_holds(r.value, call.node, holders) for r in (*scope.returns, *scope.yields)):
            return True
    return False


def _holds(expr: cst.BaseExpression | None, node: cst.CSTNode, names: set[str], depth: int = 0) -> bool:
    """Whether an expression is `node`, one of `names`, or a list, tuple, sum or choice holding one."""
    if expr is None or depth > 6:
        return False
    if expr is node or dotted(expr) in names:
        return True
    if isinstance(expr, (cst.List, cst.Tuple, cst.Set)):
        return any(_holds(e.value, node, names, depth + 1) for e in expr.elements)
    if isinstance(expr, cst.BinaryOperation):
        return _holds(expr.left, node, names, depth + 1) or _holds(expr.right, node, names, depth + 1)
    if isinstance(expr, cst.IfExp):
        return _holds(expr.body, node, names, depth + 1) or _holds(expr.orelse, node, names, depth + 1)
    return False
# -- TF_CONFIG -----------------------------------------------------------------------------------------------
_ENV_SETTERS = frozenset({"os.environ.update", "os.environ.setdefault", "os.putenv"})
_LAUNCHERS = re.compile(r"^(subprocess\.\w+|os\.(system|popen|spawn\w*|exec\w*)|multiprocessing\.(Process|Pool)|"
                        r"torch\.multiprocessing\.\w+)$")


# Horovod's place of a process, which its launcher (horovodrun, mpirun, or a scheduler's own) gives it
_HOROVOD_PLACE = frozenset({"HOROVOD_RANK", "HOROVOD_SIZE", "HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE",
                            "HOROVOD_CROSS_RANK", "HOROVOD_CROSS_SIZE"})


def tf_config_sets(facts: ModuleFacts) -> list[CallFact | AssignFact]:
    """The statements that give `TF_CONFIG` a value in this process's environment: `os.environ["TF_CONFIG"] =
    ...`, `os.environ.update(TF_CONFIG=...)` or `update({"TF_CONFIG": ...})`, `os.environ.setdefault("TF_CONFIG",
    ...)`, `os.putenv("TF_CONFIG", ...)`. Removing it (`pop`, `del`) gives it none, and a copy of the
    environment (`env = dict(os.environ)`) is another process's."""
    return facts.memo("tf_config_sets", lambda: environment_sets(facts, frozenset({"TF_CONFIG"})))


def horovod_place_sets(facts: ModuleFacts) -> list[CallFact | AssignFact]:
    """The statements that set Horovod's rank, size or local rank in this process's environment
    (`os.environ["HOROVOD_LOCAL_RANK"] = ...`): the process is placed by a launcher of the project's own (a
    scheduler's task per container, as tf-yarn's), not by `horovodrun`."""
    return facts.memo("horovod_place_sets", lambda: environment_sets(facts, _HOROVOD_PLACE))


def environment_sets(facts: ModuleFacts, keys: frozenset[str]) -> list[CallFact | AssignFact]:
    """The statements that give one of `keys` a value in this process's environment (as `tf_config_sets`)."""
    return [*(a for a in facts.assigns if a.operator == "=" and _sets_variable(facts, a, keys)),
            *(c for c in facts.calls if facts.resolve(c.func) in _ENV_SETTERS and _names_variable(c.node, keys))]


def _sets_variable(facts: ModuleFacts, assign: AssignFact, keys: frozenset[str]) -> bool:
    if not isinstance(assign.node, cst.Assign):
        return False
    return any(isinstance(t.target, cst.Subscript) and facts.resolve(t.target.value) == "os.environ"
               and string_key(t.target) in keys for t in assign.node.targets)


def _names_variable(call: cst.Call, keys: frozenset[str]) -> bool:
    for argument in call.args:
        if argument.keyword is not None:
            if argument.keyword.value in keys:
                return True
        elif literal_str(argument.value) in keys:
            return True
        elif isinstance(argument.value, cst.Dict) and any(
                isinstance(e, cst.DictElement) and literal_str(e.key) in keys for e in argument.value.elements):
            return True
    return False


def launches_processes(facts: ModuleFacts) -> bool:
    """Whether the module starts other processes (`subprocess`, `os.system`, `multiprocessing`), which
    inherit the environment it sets."""
    return any(_LAUNCHERS.match(facts.resolve(c.func) or "") for c in facts.calls)


def line_text(facts: ModuleFacts, node: cst.CSTNode) -> str:
    """Where a node of this module starts, as a message says it: `line 12`, or `cell 3 line 2` in a
    notebook. Asks for positions: call it only for a finding."""
    line = facts.position(node)[0]
    place = cell_place(facts.source_lines, line)
    return f"line {line}" if place is None else f"cell {place[0]} line {place[1]}"
