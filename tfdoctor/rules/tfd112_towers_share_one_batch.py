from __future__ import annotations

import re
from typing import Iterator

import libcst as cst

from tfdoctor.lint.dataflow import device_blocks, one_turn, one_visible_gpu
from tfdoctor.lint.facts import CallFact, LoopFact, ModuleFacts, Scope, reads
from tfdoctor.lint.findings import Severity, Violation
from tfdoctor.lint.names import call_arg, dotted
from tfdoctor.lint.rule import Context, Rule

_GPU_TEXT = re.compile(r"gpu", re.IGNORECASE)
_GRADIENTS = frozenset({"compute_gradients", "gradients", "gradient", "minimize"})
# Calls that give a tower a batch of its own when they run inside the loop: a queue's or an iterator's next
# batch, a placeholder fed per tower.
_OWN_INPUT = frozenset({"dequeue", "dequeue_many", "dequeue_up_to", "get_next", "next", "placeholder", "next_batch",
                        "get_batch", "get_next_batch", "batch", "shuffle_batch", "inputs", "distorted_inputs"})
_SCOPES = frozenset({"tensorflow.name_scope", "tensorflow.variable_scope", "tensorflow.device"})
_NAMING = frozenset({"format", "print", "str", "info", "debug", "warning"})  # they name or log a tower, not feed it
_BATCH_CALLS = frozenset({"get_next", "dequeue", "dequeue_many", "dequeue_up_to", "placeholder"})
# a helper that makes the batch (`get_input`, `read_batch`), not a batch norm
_BATCH_NAME = re.compile(r"input|batch(?!_?norm)", re.IGNORECASE)
_BATCH_PARAMETER = re.compile(r"(\w*_)?(images|labels)$|\w+_batch$|batch_\w+$", re.IGNORECASE)  # not `inputs`: an object
_SYNTHETIC = re.compile(r"^tensorflow\.(random|zeros|ones|fill|constant|truncated_normal|random_uniform|random_normal)")


class TowersShareOneBatch(Rule):
    """
    ## What it does
    Finds TF1 towers (a loop over GPU indices that opens `tf.device('/gpu:%d' % i)` and computes gradients in
    it) where the model is called on a batch made once, outside the loop (by an iterator's `get_next()`, a
    queue's `dequeue()`, a placeholder, or a helper named for inputs or batches such as `get_input`), or given
    to the function by its caller, as a parameter named for a batch of tensors (`images`, `labels`, `x_batch`,
    also kept as `self.images`; not `inputs`, which may be an object each tower takes its own batch from), and
    nothing under the device reads the loop's index: every tower gets the same batch. It stays silent when the
    loop makes a batch of its own per tower (`dequeue()`, `get_next()`, a placeholder, a helper such as
    `inputs()`), when the index picks a slice or a split (`images[i]`, `splits[i]`), when the index is given
    to any call under the device other than a scope, a name or a log line (a flag such as `reuse=(i > 0)`
    picks no data), when the batch is synthetic (`tf.random.uniform`, `tf.zeros`: a throughput benchmark),
    and where TFD109 sees one GPU (a count only ever 1, `CUDA_VISIBLE_DEVICES="0"` at the top of the module).

    ## Why it is bad
    All GPUs compute the same gradients from the same examples, and averaging them gives the gradient of one
    GPU's batch: N GPUs train at the speed of one, and the epoch is not what the step count says.

    ## Example
    ```python
    import tensorflow.compat.v1 as tf
    images, labels = read_batch(FLAGS.batch_size)
    for i in range(FLAGS.num_gpus):
        with tf.device("/gpu:%d" % i):
            loss = tower_loss(images, labels)  # TFD112
            tower_grads.append(opt.compute_gradients(loss))
    ```

    ## Use instead
    ```python
    import tensorflow.compat.v1 as tf
    images, labels = read_batch(FLAGS.batch_size * FLAGS.num_gpus)
    image_splits, label_splits = tf.split(images, FLAGS.num_gpus), tf.split(labels, FLAGS.num_gpus)
    for i in range(FLAGS.num_gpus):
        with tf.device("/gpu:%d" % i):
            loss = tower_loss(image_splits[i], label_splits[i])
            tower_grads.append(opt.compute_gradients(loss))
    ```
    """

    code = "TFD112"
    name = "towers-share-one-batch"
    severity = Severity.WARNING
    summary = "Every TF1 tower is given the same batch, so all GPUs compute the same gradients."
    MESSAGES = {"default": "every GPU tower is given the same batch `{batch}`, so each computes the same gradients"}
    triggers = ("device",)
    INVALID = (
        """import tensorflow.compat.v1 as tf
images_batch, labels_batch = get_input("train", FLAGS.batch_size)
with tf.variable_scope(tf.get_variable_scope()) as var_scope:
    for i in range(FLAGS.num_gpus):
        with tf.device("/gpu:%d" % i):
            with tf.name_scope("tower_%d" % i) as scope:
                loss = tower_loss(scope, images_batch, labels_batch)  # TFD112
                tf.summary.scalar("loss/gpu_%s" % i, loss)
                grads = opt.compute_gradients(loss)
""",
        # the index only names the tower's scope and says whether variables are reused
        """import tensorflow.compat.v1 as tf
x = tf.placeholder(tf.float32, [None, 784])
for i in range(FLAGS.num_gpus):
    with tf.device("/gpu:{}".format(i)):
        with tf.name_scope("{}_{}".format("tower", i)):
            print("building tower %d" % i)
            logits = model(x, reuse=(i > 0))  # TFD112
            grads = opt.compute_gradients(loss_fn(logits))
""",
        # one batch taken from the iterator before the loop
        """import tensorflow as tf
def train(iterator, num_gpus):
    x, y = iterator.get_next()
    for gpu in range(num_gpus):
        with tf.device(f"/gpu:{gpu}"):
            logits = model(x)  # TFD112
            grads = tf.gradients(loss_fn(logits, y), params)
""",
        # the batch the caller gave the constructor, kept on the object (the splits were commented out)
        """import tensorflow.compat.v1 as tf
class Net:
    def __init__(self, images, labels, num_gpu):
        self.images = images
        for i in range(num_gpu):
            with tf.device("/gpu:%d" % i):
                with tf.name_scope("tower_%d" % i) as scope:
                    # loss = tower_loss(x_splits[i], labels[i], scope)
                    self.loss = tower_loss(self.images, labels, scope)  # TFD112
                    tower_grads.append(self.optimizer.compute_gradients(self.loss))
""",
    )
    VALID = (
        # a parameter named `inputs` may be an object each tower takes its own batch from
        """import tensorflow.compat.v1 as tf
def build(inputs, num_gpu):
    for i in range(num_gpu):
        with tf.device("/gpu:%d" % i):
            tower_grads.append(opt.compute_gradients(tower_loss(inputs)))
""",
        # the index picks each tower's split
        """import tensorflow.compat.v1 as tf
images, labels = get_input("train", FLAGS.batch_size)
splits = tf.split(images, FLAGS.num_gpus)
for i in range(FLAGS.num_gpus):
    with tf.device("/gpu:%d" % i):
        loss = tower_loss(splits[i], labels)
        grads = opt.compute_gradients(loss)
""",
        # each tower takes its own batch from the queue
        """import tensorflow.compat.v1 as tf
batch_queue = make_queue(images, labels)
for i in range(FLAGS.num_gpus):
    with tf.device("/gpu:%d" % i):
        image_batch, label_batch = batch_queue.dequeue()
        loss = tower_loss(image_batch, label_batch)
        grads = opt.compute_gradients(loss)
""",
        # the index is given to the model, which picks the tower's part itself
        """import tensorflow.compat.v1 as tf
images = read_all()
for i in range(FLAGS.num_gpus):
    with tf.device("/gpu:%d" % i):
        loss = tower_loss(images, i)
        grads = opt.compute_gradients(loss)
""",
        # towers that compute no gradients: they evaluate one batch
        """import tensorflow.compat.v1 as tf
images = read_all()
for i in range(FLAGS.num_gpus):
    with tf.device("/gpu:%d" % i):
        outputs.append(model(images))
""",
        # the iterator is given to each tower, which takes its own batch from it
        """import tensorflow.compat.v1 as tf
iterator = dataset.make_one_shot_iterator()
for i in range(FLAGS.num_gpus):
    with tf.device("/gpu:%d" % i):
        loss = tower_loss(iterator, model_options)
        grads = opt.compute_gradients(loss)
""",
        # one GPU visible to the process: one tower
        """import os
os.environ["CUDA_VISIBLE_DEVICES"] = "0"
import tensorflow.compat.v1 as tf
x = tf.placeholder(tf.float32, [None, 784])
for i in range(FLAGS.num_gpus):
    with tf.device("/gpu:%d" % i):
        grads = opt.compute_gradients(model(x))
""",
        # a synthetic batch in a throughput benchmark
        """import tensorflow.compat.v1 as tf
images = tf.random.uniform([64, 224, 224, 3])
for i in range(FLAGS.num_gpus):
    with tf.device("/gpu:%d" % i):
        grads = opt.compute_gradients(model(images))
""",
    )

    def check(self, facts: ModuleFacts, context: Context) -> Iterator[Violation]:
        if one_visible_gpu(facts):
            return
        reported: set[int] = set()  # one finding per block
        for block, device in device_blocks(facts):
            if id(block) in reported:
                continue
            spec = call_arg(device.node, 0, "device_name")
            names = device.names_of(spec)
            loops = [loop for loop in device.loops if any(reads(names, var) for var in loop.targets)
                     and not one_turn(facts, loop)]
            if not loops or not _names_gpu(spec) or not _trains(facts, loops[-1]):
                continue
            loop = loops[-1]
            calls = [call for call in block.calls if facts.resolve(call.func) not in _SCOPES
                     and call.attr not in _NAMING and call.func not in _NAMING]
            if any(_reads_index(call, loop) for call in calls) or _makes_own_input(facts, loop):
                continue
            shared = next(((call, batch) for call in calls for batch in _shared_batches(facts, call, loop)), None)
            if shared is not None:
                reported.add(id(block))
                yield self.report(shared[0], batch=shared[1])


def _names_gpu(spec: cst.BaseExpression | None) -> bool:
    """Whether the device expression's own text names a GPU (`'/gpu:%d' % i`, `f"/device:GPU:{i}"`)."""
    if spec is None:
        return False
    found = False

    class Strings(cst.CSTVisitor):
        def visit_SimpleString(self, node: cst.SimpleString) -> None:
            nonlocal found
            found = found or bool(_GPU_TEXT.search(node.value))

        def visit_FormattedStringText(self, node: cst.FormattedStringText) -> None:
            nonlocal found
            found = found or bool(_GPU_TEXT.search(node.value))

    spec.visit(Strings())
    return found


def _trains(facts: ModuleFacts, loop: LoopFact) -> bool:
    """Whether the loop's body computes gradients (`opt.compute_gradients`, `tf.gradients`, `tape.gradient`)."""
    return any(call.attr in _GRADIENTS or (facts.resolve(call.func) or "").endswith(".gradients")
               for call in loop.calls)


def _reads_index(call: CallFact, loop: LoopFact) -> bool:
    """Whether an argument of the call reads the loop's index, or a name the loop computes from it without a
    call (`start = i * size`, `x = images[i]`), other than as a flag (`reuse=(i > 0)`, `first=i == 0`: they
    pick no data), nor as a string it names something by (`"loss/gpu_%s" % i`). What a call returns
    (`logits = model(x, reuse=i > 0)`) is the call's own question."""
    derived = set(loop.targets)
    assigns = [assign for assign in call.scope.assigns
               if loop in assign.loops and not isinstance(assign.value, cst.Call)]
    while True:
        more = {target for assign in assigns if any(reads(assign.names, var) for var in derived)
                for target in assign.targets} - derived
        if not more:
            break
        derived |= more
    return any(reads(names, var) for argument, names in zip(call.node.args, call.arg_names)
               if not isinstance(argument.value, (cst.Comparison, cst.UnaryOperation)) and not _a_name(argument.value)
               for var in derived)


def _a_name(value: cst.BaseExpression) -> bool:
    """A string made from the index (`"loss/gpu_%s" % i`, `f"tower_{i}"`): it names a tower's summary or scope."""
    return isinstance(value, cst.FormattedString) or (
        isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Modulo)
        and isinstance(value.left, (cst.SimpleString, cst.ConcatenatedString)))


def _makes_own_input(facts: ModuleFacts, loop: LoopFact) -> bool:
    """Whether a call in the loop's body gives each tower a batch of its own."""
    return any(call.attr in _OWN_INPUT or (dotted(call.node.func) or "").rsplit(".", 1)[-1] in _OWN_INPUT
               or facts.resolve(call.func) == "tensorflow.placeholder" for call in loop.calls)


def _shared_batches(facts: ModuleFacts, call: CallFact, loop: LoopFact) -> Iterator[str]:
    """The call's arguments that are batches made before the loop: names that every assignment of its scope
    binds, outside the loop, to what a call that makes a batch returns (`_makes_batch`)."""
    if (facts.resolve(call.func) or "").startswith("tensorflow.") or call.attr in ("append", "extend"):
        return
    for argument in call.node.args:
        name = dotted(argument.value)
        if name is None or name in loop.targets:
            continue
        assigns = call.scope.assignments_of(name)
        if assigns and all(loop not in assign.loops and _makes_batch(facts, assign.value, call.scope)
                           for assign in assigns) or not assigns and _batch_parameter(argument.value, call.scope):
            yield name


def _batch_parameter(value: cst.BaseExpression, scope: Scope) -> bool:
    """A parameter of the function named for a batch of tensors (`images`, `labels`, `x_batch`): its caller
    made it once."""
    return isinstance(value, cst.Name) and value.value in scope.params and bool(_BATCH_PARAMETER.match(value.value))


def _makes_batch(facts: ModuleFacts, value: cst.BaseExpression, scope: Scope) -> bool:
    """Whether a value is a batch of examples: what an iterator's `get_next()`, a queue's `dequeue()`, a
    placeholder, `tf.train.batch` or a helper named for inputs or batches (`get_input`, `read_batch`) returns,
    or a parameter named for one (`self.images = images`)."""
    if _batch_parameter(value, scope):
        return True
    if not isinstance(value, cst.Call):
        return False
    resolved = facts.resolve(value.func) or ""
    name = (dotted(value.func) or "").rsplit(".", 1)[-1]
    return not _SYNTHETIC.match(resolved) and (
        name in _BATCH_CALLS or bool(_BATCH_NAME.search(name)))
