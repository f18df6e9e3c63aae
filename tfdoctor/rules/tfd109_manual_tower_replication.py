from __future__ import annotations

import re
from pathlib import Path
from typing import Iterator

import libcst as cst

from tfdoctor.lint.dataflow import device_blocks, evaluation_name, horovod_scope, one_turn, one_visible_gpu
from tfdoctor.lint.facts import CallFact, ModuleFacts, Scope, reads
from tfdoctor.lint.findings import Severity, Violation
from tfdoctor.lint.names import call_arg, dotted
from tfdoctor.lint.rule import Context, Rule

_GPU_TEXT = re.compile(r"gpu", re.IGNORECASE)
_DEVICES = re.compile(r"(gpus|devices)$", re.IGNORECASE)  # a list of device names, by its name
_SCOPING = frozenset({"tensorflow.device", "tensorflow.name_scope", "tensorflow.variable_scope"})
# Calls that only move, cast, sum, pack or split values: a block of nothing else syncs or reduces per device, it
# does not build a model copy (`param.assign(param0.read_value())`, `tf.add_n([tf.cast(g, tf.float32) ...])`).
_MOVING = frozenset({"zip", "all", "any", "len", "range", "enumerate", "list", "tuple", "isinstance", "print", "str",
                    "append", "extend", "assign", "assign_add", "assign_sub", "read_value", "format",
                    "tensorflow.cast", "tensorflow.add_n", "tensorflow.identity", "tensorflow.group",
                    "tensorflow.concat", "tensorflow.split", "tensorflow.reshape", "tensorflow.stack",
                    "tensorflow.unstack", "tensorflow.expand_dims", "tensorflow.squeeze", "tensorflow.add",
                    "tensorflow.multiply", "tensorflow.divide", "tensorflow.truediv", "tensorflow.math.add",
                    "tensorflow.math.multiply", "tensorflow.math.divide", "tensorflow.math.truediv"})
# Calls that create a variable or its initial value: a block of only these (and the above) is a per-device store of
# tensors (to all-reduce, to keep results in), not a model copy.
_VARIABLE_STORE = frozenset({"tensorflow.Variable", "tensorflow.get_variable", "tensorflow.placeholder",
                             "tensorflow.zeros", "tensorflow.ones", "tensorflow.zeros_like", "tensorflow.ones_like",
                             "tensorflow.fill", "tensorflow.constant", "tensorflow.random_normal",
                             "tensorflow.random.normal", "tensorflow.random_uniform", "tensorflow.random.uniform",
                             "tensorflow.truncated_normal", "tensorflow.random.truncated_normal",
                             "tensorflow.zeros_initializer", "tensorflow.ones_initializer",
                             "tensorflow.constant_initializer", "tensorflow.random_normal_initializer",
                             "tensorflow.truncated_normal_initializer", "add_weight", "add_variable"})
_NOT_BUILDING = _MOVING | _VARIABLE_STORE
HELPER_DEPTH = 2  # project helpers looked into for what a device block builds
_PER_DEVICE_UPDATES = frozenset({"apply_gradients", "get_gradients_to_apply", "append_apply_gradients_ops"})
_DEVICE_STATE = ("MaxBytesInUse", "BytesInUse", "BytesLimit")
_SCOPE_SUFFIXES = ("name_scope", "variable_scope")  # a library's own scopes (tensorpack's cached_name_scope)


class ManualTowerReplication(Rule):
    """
    ## What it does
    Finds a loop over GPU indices that opens `tf.device('/gpu:%d' % i)` (or an f-string or `.format`, or
    a helper given the index whose code names a GPU device, or `devices[i]` from a list named `gpus` or
    `devices`, also through `enumerate` and `zip`, or as the `worker_device` of
    `tf.train.replica_device_setter`) and builds something under it: the TF1 "tower" pattern of one model
    copy per GPU with gradients averaged by hand. A block that only assigns, casts or sums values per device
    (syncing variables, reducing gradients), or only creates variables and their initial values (a store of
    tensors per device, to all-reduce or to keep results in), builds nothing; nor does one that walks the
    towers' gradients (`for d, grads in zip(devices, tower_grads)`), applies them, or reads a device's memory
    use. A loop whose GPU count is only ever the literal 1 (`self.num_gpus = 1`) builds one copy, and a module
    that makes one GPU visible at its top (`os.environ["CUDA_VISIBLE_DEVICES"] = "0"`) has one: neither is
    reported. Towers in a function or class named for prediction or evaluation (`OfflinePredictor`,
    `FeedForwardEvaluator`), or in a module so named that computes no gradients (`multi_gpu_test_rgb.py`), run
    a model rather than train it, and are left alone. So is a generic helper that
    runs only functions its caller passes on devices its caller names (Mesh-TensorFlow's
    `parallel(devices, fn, *args)`): whether that builds model copies is the caller's choice. A module gets
    one finding, at its first per-GPU loop, which names the others (related locations): the towers of one
    model are one migration.

    ## Why it is bad
    Hand-written towers copy variables and gradients through the host, average them with Python-built ops,
    and are easy to get subtly wrong (variable reuse, batch-norm statistics, uneven splits). A
    `tf.distribute` strategy does the same with NCCL all-reduce and mirrored variables.

    It is a migration hint, off unless selected: on working TF1 code, tutorials and copies of the classic
    towers examples it means a port, and blind reviewers of real repositories judged 13 of 18 such findings
    not worth reading. The mistakes towers make are rules of their own, on by default (TFD112: every
    tower given the same batch).

    ## Example
    ```python
    import tensorflow as tf
    tower_grads = []
    for i in range(NUM_GPUS):
        with tf.device("/gpu:%d" % i):  # TFD109
            loss = tower_loss(images[i], labels[i])
            tower_grads.append(opt.compute_gradients(loss))
    ```

    ## Use instead
    ```python
    import tensorflow as tf
    strategy = tf.distribute.MirroredStrategy()
    with strategy.scope():
        model = build_model()
    ```
    """

    code = "TFD109"
    name = "manual-tower-replication"
    severity = Severity.INFO
    OPT_IN = True
    summary = "A loop over GPU indices builds model copies under `tf.device` (TF1 towers)."
    MESSAGES = {"default": ("a loop builds one model copy per GPU under `tf.device` (TF1 towers); use "
                            "`MirroredStrategy`")}
    triggers = ("device",)
    INVALID = (
        # a tower per GPU, each under a device setter that keeps the variables on the CPU
        """import tensorflow.compat.v1 as tf
gpus = ["/gpu:{}".format(i) for i in range(num_gpus)]
for i in range(num_gpus):
    with tf.device(tf.train.replica_device_setter(ps_tasks=1, ps_device="/cpu:0", worker_device=gpus[i])):  # TFD109
        towers.append(model_fn(inputs[i]))
""",
        """import tensorflow.compat.v1 as tf
def build_towers(n):
    outs = []
    for gpu in range(n):
        with tf.device(f"/device:GPU:{gpu}"):  # TFD109
            outs.append(model_fn(inputs[gpu]))
    return outs
""",
        """from tensorflow import device
for k in range(len(gpus)):
    with device("/gpu:{}".format(k)):  # TFD109
        logits = net(batch[k])
""",
        # the device is picked from a list of them by the loop's index
        """import tensorflow.compat.v1 as tf
for i in range(len(Config.available_devices)):
    device = Config.available_devices[i]
    with tf.device(device):  # TFD109
        logits = create_model(batch[i])
""",
        # the device string comes from a helper, given the loop index
        """import tensorflow.compat.v1 as tf
def assign_to_gpu(gpu=0, ps_dev="/device:CPU:0"):
    def _assign(op):
        return ps_dev if op.type == "VarHandleOp" else "/gpu:%d" % gpu
    return _assign
for i in range(num_core_per_host):
    with tf.device(assign_to_gpu(i, ps_device)):  # TFD109
        loss_i, grads_i = single_core_graph(inputs[i])
""",
        # a device list zipped with the input splits, under enumerate
        """import tensorflow as tf
DEVICES = ["/gpu:{}".format(i) for i in range(N_GPUS)]
splits = tf.split(images, len(DEVICES))
for index, (device, split) in enumerate(zip(DEVICES, splits)):
    with tf.device(device):  # TFD109
        costs.append(loss(Generator(split)))
""",
        # the towers of one module, built and then given their losses in two loops: one finding, naming the other
        """import tensorflow.compat.v1 as tf
class Tacotron:
    def initialize(self, inputs):
        for i in range(num_gpus):
            with tf.device("/gpu:%d" % i):  # TFD109
                self.outputs.append(self.decoder(self.encoder(inputs[i])))
    def add_loss(self):
        for i in range(num_gpus):
            with tf.device("/gpu:%d" % i):
                self.losses.append(self.loss_fn(self.outputs[i]))
""",
    )
    VALID = (
        # a loop over a one-device literal: one model, built once on that GPU
        """import tensorflow as tf
for i in [1]:
    with tf.device('/gpu:%d' % i):
        logits = build_model(images)
        loss = tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(labels=labels, logits=logits))
""",
        # a GPU count that is only ever 1: one tower
        """import tensorflow.compat.v1 as tf
class YoloTrain:
    def __init__(self):
        self.num_gpus = 1
    def build(self, images):
        for i in range(self.num_gpus):
            with tf.device('/gpu:%d' % i):
                self.loss = build_model(images[i])
""",
        # one GPU made visible at the top of the module, whatever count the flags give
        """import os
os.environ["CUDA_VISIBLE_DEVICES"] = "0"
import tensorflow.compat.v1 as tf
for i in range(args.num_gpus):
    with tf.device('/gpu:%d' % i):
        loss = build_model(images[i])
""",
        # towers that run a network forward and fetch its outputs (StyleGAN's `Network.run`): inference
        """import tensorflow as tf
class Network:
    def run(self, *inputs, num_gpus=1):
        in_expr = [tf.placeholder(tf.float32) for _ in self.input_names]
        out_split = []
        for gpu in range(num_gpus):
            with tf.device("/gpu:%d" % gpu):
                net_gpu = self.clone()
                out_split.append(net_gpu.get_output_for(*in_expr))
        return tf.get_default_session().run(out_split, dict(zip(in_expr, inputs)))
""",
        # towers inside a Horovod rank: Horovod already runs one process per GPU
        """import tensorflow as tf
import horovod.tensorflow as hvd
def training_loop(num_gpus):
    hvd.init()
    for gpu in range(num_gpus):
        with tf.device("/gpu:%d" % gpu):
            G_gpu = G.clone()
            loss = compute_loss(G_gpu)
""",
        # a generic helper that runs its caller's function on its caller's devices (Mesh-TensorFlow's `parallel`)
        """import tensorflow as tf
def parallel(devices, fn, *args):
    outputs = []
    for i, device in enumerate(devices):
        with tf.device(device):
            outputs.append(fn(*[arg[i] for arg in args]))
    return outputs
""",
        # the same as a class that holds its devices, calling an item of the functions it was given
        """import tensorflow as tf
class Parallelism:
    def __call__(self, fn, *args):
        fns = fn if isinstance(fn, list) else [fn] * len(self._devices)
        outputs = []
        for i in range(len(self._devices)):
            with tf.device(self._devices[i]):
                outputs.append(fns[i](*[arg[i] for arg in args]))
        return outputs
""",
        # towers of a predictor: they run the model, they do not train it
        """import tensorflow.compat.v1 as tf
class DataParallelOfflinePredictor:
    def __init__(self, num_gpus):
        for i in range(num_gpus):
            with tf.device("/gpu:{}".format(i)):
                self.outputs.append(build_graph(self.inputs[i]))
""",
        # per device: splitting the summed gradients back, applying them, reading memory use
        """import tensorflow.compat.v1 as tf
from tensorflow.contrib.memory_stats import MaxBytesInUse
for d, s, grad_list in zip(devices, summed, tower_grads):
    with tf.device(d):
        parts = split_back(s, grad_list)
for i, device in enumerate(devices):
    with tf.device(device):
        train_ops.append(opt.apply_gradients(scale(tower_grads[i])))
for dev in devices:
    with tf.device(dev):
        peaks.append(MaxBytesInUse())
""",
        # a loop over device names zipped with something else: the device is not what the loop takes from the list
        """import tensorflow as tf
for name, device in zip(gpus, placements):
    with tf.device(device):
        x = load(name)
""",
        # per-device gradient sums and variable syncs: nothing is built under the device
        """import tensorflow as tf
for index, device in enumerate(devices):
    with tf.device(device):
        sums.append(tf.add_n([tf.cast(g, tf.float32) for g in grads[device]]))
for device, params in zip(devices, tower_params):
    with tf.device(device):
        for param, param0 in zip(params, params0):
            sync_ops.append(param.assign(param0.read_value()))
""",
        # a store of variables per device (tensors an all-reduce benchmark reduces), no model
        """import tensorflow.compat.v1 as tf
for i, device in enumerate(devices):
    with tf.device(device):
        tensors.append([tf.Variable(tf.random_normal(shape)) for shape in shapes])
""",
        # a fixed CPU placement for the input pipeline
        """import tensorflow as tf
for i in range(10):
    with tf.device("/cpu:0"):
        x = load(i)
""",
        # device loop that only names things
        """import tensorflow as tf
for i in range(2):
    with tf.device("/gpu:%d" % i):
        pass
""",
        # a helper that only logs about GPUs
        """import tensorflow as tf
def pick(i):
    print("GPU: none, using the CPU")
    return "/cpu:0"
for i in range(4):
    with tf.device(pick(i)):
        x = load(i)
""",
        # a layer that keeps one shard of its table per GPU (model parallelism), and a session run per GPU
        """import tensorflow as tf
class ShardedEmbedding(tf.keras.layers.Layer):
    def build(self, _):
        self.shards = []
        for i, gpu in enumerate(self.gpus):
            with tf.device("/gpu:%d" % gpu):
                self.shards.append(self.add_weight(name="shard_" + str(i), shape=(self.rows[i], self.width)))
for batch in batches:
    for i in range(num_gpus):
        with tf.device("/gpu:{}".format(i)):
            loss_value = sess.run([train_op, loss], feed_dict={x: batch[i::num_gpus]})
""",
        # a hand-written ring all-reduce: values move between devices, no model is built
        """import tensorflow as tf
def allreduce_ring_single_shard(xs, devices, reduction_fn):
    left_sum = xs[0]
    for i in range(1, len(xs)):
        with tf.device(devices[i]):
            left_sum = reduction_fn(left_sum, xs[i])
    return left_sum
""",
        # a loop over GPUs that only configures memory growth
        """import tensorflow as tf
for gpu in tf.config.list_physical_devices("GPU"):
    tf.config.experimental.set_memory_growth(gpu, True)
""",
    )

    def check(self, facts: ModuleFacts, context: Context) -> Iterator[Violation]:
        found = list(self._towers(facts))
        if found:  # the towers of one module are one migration: one finding, the other loops related to it
            yield from self.one_for_all(found, "another per-GPU loop")

    def _towers(self, facts: ModuleFacts) -> Iterator[Violation]:
        """Every per-GPU block of the module that builds something (none when the module shows one GPU)."""
        if one_visible_gpu(facts):
            return
        for block, device in device_blocks(facts):
            spec = call_arg(device.node, 0, "device_name")
            names = device.names_of(spec)
            if isinstance(spec, cst.Call) and (facts.resolve(spec.func) or "").endswith(".replica_device_setter"):
                spec = call_arg(spec, None, "worker_device")  # TF1 towers: the GPU is the worker device
            loop_vars = {t for loop in device.loops if not one_turn(facts, loop) for t in loop.targets}
            builds = [c for c in block.calls if _builds(facts, c)]
            per_gpu = ((_mentions_gpu(facts, spec, device.scope) and any(reads(names, v) for v in loop_vars))
                       or _picked_from_devices(facts, spec, device, loop_vars))
            if per_gpu and builds and not _handles_gradients(facts, device, block.calls) \
                    and not _predicts(facts, device.scope) and not _communicates(device.scope) \
                    and not _applies_callers_function(facts, spec, device, builds) \
                    and not _infers(facts, device.scope) and not horovod_scope(facts, device.scope):
                yield self.report(device)


def _builds(facts: ModuleFacts, call: CallFact, depth: int = 0) -> bool:
    """Whether a call in a device block may build part of a model: not a scope, nor a call that only moves,
    casts, sums, packs or splits values or creates a variable or its initial value, nor a project helper whose
    own calls are all such (tensorpack's `GradientPacker.pack`, which concatenates and splits gradients per
    device); unknown calls may."""
    names = {facts.resolve(call.func), call.attr, call.func}
    if call.attr == "run" and "sess" in (dotted(call.receiver) or "").rpartition(".")[2].lower():
        return False  # `sess.run(...)` runs a graph built before; the device scope places nothing
    if facts.resolve(call.func) in _SCOPING or names & _NOT_BUILDING or \
            any(isinstance(n, str) and n.endswith(_SCOPE_SUFFIXES) for n in names):
        return False
    helpers = facts.callables_of(call.node.func, call.scope) if depth < HELPER_DEPTH else []
    if not helpers:
        return True
    return any(_builds(facts, inner, depth + 1) for helper in helpers for inner in helper.calls)


def _handles_gradients(facts: ModuleFacts, device: CallFact, calls: list[CallFact]) -> bool:
    """A per-device block that works on gradients the towers made, or reads a device's state: its loop walks
    gradient lists (`for d, grads in zip(devices, tower_grads)`), or it applies gradients or reads memory use.
    It builds no model copy (the towers, when there are any, are built elsewhere)."""
    loop = device.loops[-1] if device.loops else None
    if loop is not None and any("grad" in target.lower() for target in loop.targets):
        return True
    return any(call.attr in _PER_DEVICE_UPDATES or (facts.resolve(call.func) or "").endswith(_DEVICE_STATE)
               for call in calls)


def _predicts(facts: ModuleFacts, scope: Scope | None) -> bool:
    """Towers built by code named for prediction or evaluation (`DataParallelOfflinePredictor`,
    `FeedForwardEvaluator`, `def predict_towers`), or in a module so named that computes no gradients
    (`multi_gpu_test_kinetics.py`): they run a model, they do not train one."""
    while scope is not None and scope.is_function:
        if any(evaluation_name(name) and "train" not in name.lower() for name in (scope.name, scope.class_name or "")):
            return True
        scope = scope.parent
    stem = Path(facts.path).stem
    return evaluation_name(stem) and "train" not in stem.lower() and not any(
        call.attr in _GRADIENT_CALLS or (call.func or "").rpartition(".")[2] in _GRADIENT_CALLS for call in facts.calls)


_TRAINING_WORD = re.compile(r"grad|minimi[sz]e|loss|optimi[sz]er", re.IGNORECASE)


def _infers(facts: ModuleFacts, scope: Scope) -> bool:
    """Whether the function around the towers runs what it builds (`sess.run`, `tfutil.run`) while neither it
    nor its class (Tacotron's `initialize` builds the towers, `add_loss` their losses) calls anything that works
    on a loss, gradients or an optimizer: StyleGAN's `Network.run` runs a model forward, it does not train one."""
    function = scope
    while function.parent is not None and function.parent.is_function:
        function = function.parent
    if not function.is_function:
        return False  # the module's top level: a script, whose training may follow in any form
    found = facts.class_named(function.class_name) if function.class_name is not None else None
    functions = list(found.methods.values()) if found is not None else [function]
    calls = [call for inner in facts.scopes if any(inner.within(f) for f in functions)
             for call in inner.calls]
    runs = any(call.attr == "run" and call.scope.within(function) for call in calls)
    return runs and not any(_TRAINING_WORD.search(call.func or call.attr or "")
                            or any(_TRAINING_WORD.search(callee.name) for callee in facts.callees(call))
                            for call in calls)


_GRADIENT_CALLS = frozenset({"gradients", "gradient", "compute_gradients", "minimize", "apply_gradients"})


# what a function that moves values between devices is named: a collective written by hand (Mesh-TensorFlow's
# `allreduce_ring_single_shard`, `alltoall_ring`), not a model copy per device
_COLLECTIVE = re.compile(r"all_?reduce|all_?to_?all|all_?gather|reduce_?scatter|"
                         r"(^|_)(broadcast|collective|ring|send|recv|receive|shift)(_|$)", re.IGNORECASE)


def _communicates(scope: Scope | None) -> bool:
    """Per-device blocks in a function named for moving values between devices (a hand-written all-reduce)."""
    while scope is not None and scope.is_function:
        if _COLLECTIVE.search(scope.name):
            return True
        scope = scope.parent
    return False


def _applies_callers_function(facts: ModuleFacts, spec: cst.BaseExpression | None, device: CallFact,
                              builds: list[CallFact]) -> bool:
    """A generic per-device helper (Mesh-TensorFlow's `parallel(devices, fn, *args)`, Tensor2Tensor's
    `Parallelism.__call__(fn, ...)` calling `fns[i]`): it runs only functions its caller passes, on devices
    the caller names, so whether it builds model copies is the caller's choice."""
    params = set(device.scope.value_params()) if device.scope.is_function else set()
    return bool(params) and not _mentions_gpu(facts, spec, device.scope) and all(
        _passed_in(facts, call, params) for call in builds)


def _passed_in(facts: ModuleFacts, call: CallFact, params: set[str]) -> bool:
    """Whether a call calls a function its scope was given: a parameter (`fn(...)`), or an item of a name made
    from parameters (`fns[i](...)` with `fns = fn if isinstance(fn, list) else [fn] * n`)."""
    callee = call.node.func
    if isinstance(callee, cst.Subscript):
        callee = callee.value
    name = dotted(callee)
    if name is None:
        return False
    if name in params:
        return True
    made = facts.definitions(name, call.scope, call.order)
    return bool(made) and all(assign.names & params for assign in made)


def _picked_from_devices(facts: ModuleFacts, spec: cst.BaseExpression | None, device: CallFact,
                         loop_vars: set[str]) -> bool:
    """A device taken from a list of them by the loop: `for d in gpus: with tf.device(d)`, or
    `devices[i]` (directly, or through a name bound to it in the loop) with `i` the loop's index."""
    name = dotted(spec) if spec is not None else None
    if name in loop_vars:
        return any(name in loop.targets and _DEVICES.search(dotted(loop.iterated(name)) or "")
                   for loop in device.loops)
    if name is not None and "." not in name:
        found = facts.definitions(name, device.scope, device.order)
        spec = found[-1].value if found and found[-1].loops else spec
    if not (isinstance(spec, cst.Subscript) and len(spec.slice) == 1 and isinstance(spec.slice[0].slice, cst.Index)):
        return False
    return bool(_DEVICES.search(dotted(spec.value) or "")) and dotted(spec.slice[0].slice.value) in loop_vars


def _mentions_gpu(facts: ModuleFacts, spec: cst.BaseExpression | None, scope: Scope) -> bool:
    """Whether a device string expression (`'/gpu:%d' % i`, an f-string, `'/gpu:{}'.format(i)`) names a GPU,
    also through a helper: one given such a string (`assign_to_device('/gpu:{}'.format(i))`), or one that
    returns one (`assign_to_gpu(i)`, `return '/gpu:%d' % gpu`)."""
    if isinstance(spec, cst.Call) and not _is_format(spec):
        if any(_mentions_gpu(facts, arg.value, scope) for arg in spec.args):
            return True
        return any(_returns_gpu(helper) for helper in facts.callables_of(spec.func, scope))
    return _names_gpu(spec)


def _returns_gpu(helper: Scope, depth: int = 0) -> bool:
    """Whether a helper (or a function it defines, as `assign_to_gpu` returns its placement function)
    returns a GPU device string: `return "/gpu:%d" % gpu`, also as one branch of an `if`-`else`."""
    if any(_names_gpu(value) for ret in helper.returns for value in _branches(ret.value)):
        return True
    return depth < 2 and any(_returns_gpu(child, depth + 1) for child in helper.children)


def _branches(value: cst.BaseExpression) -> list[cst.BaseExpression]:
    if isinstance(value, cst.IfExp):
        return [*_branches(value.body), *_branches(value.orelse)]
    return [value]


def _is_format(call: cst.Call) -> bool:
    return isinstance(call.func, cst.Attribute) and call.func.attr.value == "format"


def _names_gpu(spec: cst.BaseExpression | None) -> bool:
    """Whether a device string expression names a GPU."""
    if isinstance(spec, cst.BinaryOperation):
        return _names_gpu(spec.left)
    if isinstance(spec, cst.FormattedString):
        return any(isinstance(p, cst.FormattedStringText) and _GPU_TEXT.search(p.value) for p in spec.parts)
    if isinstance(spec, cst.Call) and _is_format(spec):
        return _names_gpu(spec.func.value)  # type: ignore[attr-defined]
    if isinstance(spec, cst.SimpleString):
        return bool(_GPU_TEXT.search(spec.value))
    return False
