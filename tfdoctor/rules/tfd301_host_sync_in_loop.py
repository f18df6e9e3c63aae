from __future__ import annotations

from typing import Iterator

import libcst as cst
import libcst.matchers as m

from tfdoctor.lint.dataflow import (
    calls_training_step,
    counters_read,
    distributed_program,
    expression_names,
    gated_if,
    gated_periodically,
    horovod_module,
    loop_ifs,
    paced_by_python,
    returns_host_values,
    runs_many_steps,
    step_counter,
    training_loops,
)
from tfdoctor.lint.facts import CallFact, IfFact, LoopFact, ModuleFacts, reads
from tfdoctor.lint.findings import Severity, Violation
from tfdoctor.lint.names import dotted
from tfdoctor.lint.rule import Context, Rule

_CONVERTERS = frozenset({"float", "int", "print"})
_ORDERINGS = (cst.LessThan, cst.LessThanEqual, cst.GreaterThan, cst.GreaterThanEqual)
_EQUALITIES = (cst.Equal, cst.NotEqual)


class HostSyncInLoop(Rule):
    """
    ## What it does
    Finds `.numpy()`, `float()`, `int()` or `print()` of a training step's outputs (of the step's call itself,
    `print(train_step(x))`, or of a value the loop computes from them, such as a running total) on every
    iteration of the training loop, an `if` that compares one (`if loss < best:`, `if step == num_steps:`; not against `None` or a string), and
    `optimizer.iterations.numpy()`; likewise a step counter that lives on the device (an optimizer's
    `iterations`, a `tf.Variable` or the global step named for steps, `ckpt.step` of a `tf.train.Checkpoint`)
    read back (`ckpt.step.numpy()`) or tested (`if global_step >= total:`, `if tf.equal(global_step % n, 0):`,
    `True if (opt.iterations + 1) % n == 0 else False`, `while iterations < total:` with `iterations =
    optimizer.iterations`) in a loop that runs eagerly.
    Work under `if step % N == 0` (or under a flag computed so, `do_log = step % N == 0`, by a TensorFlow op
    or by a function that returns such a test) runs every N steps and is not flagged, nor is work under a test
    of the seconds elapsed (`if now - last_log >= 120:`, with `now = time.time()`); nor are the results of
    `train_on_batch`, which are already on the host, nor reads in a loop whose iteration may run many steps
    (it calls a `tf.function` that loops over steps itself, or the `train_function` of a model compiled with
    `steps_per_execution`), nor reads in a loop over a dataset fed by a Python generator
    (`Dataset.from_generator`, also through `experimental_distribute_dataset` and another module's call): the
    generator sets that loop's pace, and TFD201 is the finding there; nor reads in a loop that builds each
    step's input from the last step's value on the host (`last = result.numpy()`, then `x =
    tf.random.uniform(shape, minval=last)` feeds the step): every step must wait for it. Only in a program
    that distributes training (a strategy, Horovod, `multi_gpu_model` or TF 1 towers, in the module or a
    project module next to it in the imports): on one device the wait costs a dispatch gap whose size the code
    does not show, and a single-device eager step spends far more on dispatching its operations one by one than
    on the wait. A loop that runs while a graph is built (in a `tf.function`, or only called in `with
    tf.Graph().as_default():`) holds symbolic tensors, and is not reported. A loop gets one finding, at its
    first read, which names the others (related locations): once one read has waited for the step the others
    find the device idle, but each waits in turn when those before it go.

    Off by default: what a read per step costs turns on how long the step is, which the code does not show, and
    reviews of real repositories found most of these reads deliberate per-step logging whose wait hardly
    mattered. `tfdoctor profile` checks this rule on the script it runs, where it measures the host's share of
    the step; `--select TFD301` (or `select = ["TFD"]`) turns it on for `lint`.

    ## Why it is bad
    Reading a tensor's value makes the host wait until the device has finished the step. The input
    pipeline and the next step's dispatch stop overlapping with compute, and each step pays the full
    round trip; with several GPUs, all of them wait.

    ## Example
    ```python
    import tensorflow as tf
    for step, batch in enumerate(dist_ds):
        loss = train_step(batch)
        print("loss", loss.numpy())  # TFD301

    @tf.function
    def train_step(batch):
        return strategy.run(replica_step, args=(batch,))
    ```

    ## Use instead
    ```python
    import tensorflow as tf
    for step, batch in enumerate(dist_ds):
        loss = train_step(batch)
        if step % 100 == 0:
            print("loss", loss.numpy())

    @tf.function
    def train_step(batch):
        return strategy.run(replica_step, args=(batch,))
    ```
    """

    code = "TFD301"
    name = "host-sync-in-loop"
    severity = Severity.WARNING
    OPT_IN = True  # what a sync costs turns on the step's length; `tfdoctor profile` checks it and measures that
    summary = "`.numpy()`/`float()`/`print()` of step outputs every step makes the host wait for the device."
    MESSAGES = {
        "default": "`{func}()` reads a step output on every iteration of the training loop",
        "counter": "`{counter}.numpy()` reads the optimizer's step counter on every iteration of the training loop",
        "variable": "`{counter}` is read back from the device on every iteration of the training loop",
        "test": "{what} reads the step counter `{counter}` on every iteration of the training loop",
        "branch": "`if` compares a step output on every iteration of the training loop",
    }
    triggers = ("numpy", "float", "int", "print", "if ")
    INVALID = (
        """import tensorflow as tf
class Trainer:
    @tf.function
    def step(self, x):
        return self.strategy.run(self.replica, args=(x,))
    def fit(self, ds):
        history = []
        for x in ds:
            loss = self.step(x)
            history.append(float(loss))  # TFD301
""",
        """import tensorflow as tf
@tf.function
def train_step(x, y):
    optimizer.apply_gradients(grads(x, y))
    return metrics(x, y)
it = iter(strategy.experimental_distribute_dataset(ds))
while True:
    out = train_step(*next(it))
    print(out)  # TFD301
""",
        # the step counter read back every step, and a step output used as a Python bool: one finding for the
        # loop, at its first read, naming the other
        """import tensorflow as tf
@tf.function
def train_step(x):
    return strategy.run(replica, args=(x,))
best = 1e9
for x in dist:
    step = optimizer.iterations.numpy()  # TFD301
    loss = train_step(x)
    if loss < best:
        best = loss
""",
        # the step function reaches the loop as a parameter, bound where the loop is called
        """import tensorflow as tf
@tf.function
def distributed_step(strategy, batch):
    return strategy.run(replica, args=(batch,))
def run_loop(strategy, dataset, optimizer, step_fn):
    for batch in dataset:
        iterations = optimizer.iterations.numpy()  # TFD301
        step_fn(strategy, batch)
def main(strategy, dataset, optimizer):
    run_loop(strategy, dataset, optimizer, step_fn=distributed_step)
""",
        # a running total of the step's loss, read back every step for the progress bar
        """import tensorflow as tf
@tf.function
def train_step(x):
    return strategy.run(replica, args=(x,))
total = 0
for i, x in enumerate(dist):
    loss = train_step(x)
    total = total + loss
    bar.set_postfix(loss=float(total) / (i + 1))  # TFD301
""",
        # a step counter the step returns, compared to stop the loop
        """import tensorflow as tf
@tf.function
def train_step(x):
    loss = strategy.run(replica, args=(x,))
    return loss, optimizer.iterations
for x in dist:
    loss, step = train_step(x)
    if step == num_steps:  # TFD301
        break
""",
        # a step counter variable tested every step
        """import tensorflow as tf
@tf.function
def train_step(x):
    return strategy.run(replica, args=(x,))
global_step = tf.Variable(0, dtype=tf.int64)
for x in dist:
    train_step(x)
    global_step.assign_add(1)
    if global_step >= total_steps:  # TFD301
        break
""",
        # a checkpoint's step counter read back every step
        """import tensorflow as tf
@tf.function
def train_step(x):
    return strategy.run(replica, args=(x,))
ckpt = tf.train.Checkpoint(step=tf.Variable(1))
for x in dist:
    train_step(x)
    print("step", ckpt.step.numpy())  # TFD301
""",
        # a `while` test on the optimizer's counter, through a name bound to it, read again in the body
        """import tensorflow as tf
@tf.function
def minimize(iterator):
    return strategy.run(replica, args=(next(iterator),))
iterations = optimizer.iterations
while iterations < final_iteration:  # TFD301
    if iterations.numpy() % 100 == 0:
        update_target()
    minimize(it)
""",
        # the optimizer's counter as a Python bool in a conditional expression
        """import tensorflow as tf
@tf.function
def train_step(x):
    return strategy.run(replica, args=(x,))
for x in dist:
    train_step(x)
    log_now = True if (optimizer.iterations + 1) % 100 == 0 else False  # TFD301
""",
        # the step's result printed where it is made
        """import tensorflow as tf
@tf.function
def train_step(x):
    return strategy.run(replica, args=(x,))
for x in dist:
    print(train_step(x))  # TFD301
""",
        # an op over each of the step's outputs, brought back for a progress bar
        """import tensorflow as tf
@tf.function
def train_step(x):
    return strategy.run(replica, args=(x,))
for x in dist:
    outs = train_step(x)
    values = [tf.reduce_mean(o).numpy() for o in outs]  # TFD301
    progbar.add(1, values)
""",
    )
    VALID = (
        # a trainer's own Python count of its steps, named like an optimizer's
        """import tensorflow as tf
class Trainer:
    def train(self, dataset):
        self.iterations = 1
        for images, targets in dataset:
            loss = distributed_train_step(images, targets)
            self.iterations += 1
            if self.iterations % self.log_after == 0:
                self.write_summaries(loss)
""",
        # each step's input is built from the last step's value on the host: every step must wait for it
        """import tensorflow as tf
@tf.function
def train_step(inputs):
    return strategy.run(step_fn, args=(inputs,))
last_result = 2.0
for i in range(1000):
    inputs = tf.random.uniform([100], minval=last_result, maxval=last_result + 2)
    result = train_step(inputs)
    print(result)
    last_result = result.numpy()
""",
        # prioritized replay: the TD errors read on the host decide which transitions the next step trains on
        """import numpy as np
import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
@tf.function
def update_agent(**batch):
    return strategy.run(replica_update, kwargs=batch)
for iteration in range(steps):
    batch_data = sample_batch(exp_replay, batch_size=64)
    indexes = batch_data.pop("td_indexes")
    loss_t = update_agent(**batch_data)
    exp_replay.update_td_error(indexes, np.abs(loss_t.numpy().flatten()))
""",
        # a loop run while a TF 1 graph is built: the step returns symbolic tensors, and print shows no value
        """import tensorflow as tf
def train(strategy, iterator, steps):
    with tf.Graph().as_default(), strategy.scope():
        @strategy.function
        def step(inputs):
            grads = tf.gradients(loss_fn(inputs), variables)
            return optimizer.apply_gradients(zip(grads, variables)), loss_fn(inputs)

        def train_steps(steps):
            for i in range(steps):
                _, loss = step(iterator)
                print("step", i, loss)

        train_steps(steps)
""",
        # one device, a tf.function step: the wait's cost is not shown
        """import tensorflow as tf
@tf.function
def train_step(x, y):
    optimizer.apply_gradients(grads(x, y))
    return loss(x, y)
for x, y in ds:
    print(float(train_step(x, y)))
""",
        # one device, a step function that is not a tf.function: eager dispatch dwarfs the wait
        """import tensorflow as tf
def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x, training=True))
    optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
    return loss
for x, y in dataset:
    loss = train_step(x, y)
    print("loss", float(loss))
""",
        # one device, every operation dispatched eagerly: the wait is small beside the dispatch
        """import tensorflow as tf
for x, y in dataset:
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x, training=True))
    optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
    print("loss", loss.numpy())
""",
        """import tensorflow as tf
@tf.function
def train_step(x):
    return strategy.run(replica, args=(x,))
for step, x in enumerate(dist):
    loss = train_step(x)
    if step % 50 == 0:
        print(step, loss.numpy())
""",
        # printing something that is not a step output
        """import tensorflow as tf
@tf.function
def train_step(x):
    return strategy.run(replica, args=(x,))
for step, x in enumerate(dist):
    train_step(x)
    print("step", step)
""",
        # per-epoch logging outside the step loop
        """import tensorflow as tf
@tf.function
def train_step(x):
    return strategy.run(replica, args=(x,))
for epoch in range(3):
    for x in dist:
        loss = train_step(x)
    print(epoch, float(loss))
""",
        # logging gated by a flag computed from the step
        """import tensorflow as tf
@tf.function
def train_step(x):
    return strategy.run(replica, args=(x,))
for step, x in enumerate(dist):
    loss = train_step(x)
    do_log = (step + 1) % 100 == 0
    if do_log:
        print(step, float(loss))
""",
        # a flag from a TensorFlow op or a function that tests the step modulo N; a Python step counter
        """import tensorflow as tf
@tf.function
def train_step(x):
    return strategy.run(replica, args=(x,))
def should_log(step):
    return step % 100 == 0
global_step = 0
for step, x in enumerate(dist):
    loss = train_step(x)
    global_step += 1
    if tf.equal(step % 100, 0):
        print(step, float(loss))
    if should_log(step):
        print(step, loss.numpy())
    if global_step >= total_steps:
        break
""",
        # logging every two minutes: a test of the seconds elapsed since the last log
        """import time
import tensorflow as tf
@tf.function
def train_step(x):
    return strategy.run(replica, args=(x,))
last_log = time.time()
for x in dist:
    loss = train_step(x)
    now = time.time()
    if now - last_log >= 120:
        print(float(loss))
        last_log = now
""",
        # each iteration runs many steps inside one tf.function
        """import tensorflow as tf
@tf.function
def train_steps(iterator, steps):
    for _ in tf.range(steps):
        loss = strategy.run(replica, args=(next(iterator),))
    return loss
for epoch in range(epochs):
    loss = train_steps(iterator, tf.constant(steps_per_epoch))
    print(epoch, float(loss), optimizer.iterations.numpy())
""",
        # a value computed from one that is already on the host
        """import tensorflow as tf
@tf.function
def train_step(x):
    return strategy.run(replica, args=(x,))
for step, x in enumerate(dist):
    loss = train_step(x)
    if step % 100 == 0:
        host = float(loss)
    scaled = host * 2
    print(int(scaled))
""",
        # train_on_batch returns numpy values: already on the host
        """import tensorflow as tf
for x, y in batches:
    loss = model.train_on_batch(x, y)
    if loss < 0.1:
        break
    print(float(loss))
""",
    )

    def check(self, facts: ModuleFacts, context: Context) -> Iterator[Violation]:
        flagged: set[int] = set()
        for loop in training_loops(facts):
            if runs_many_steps(facts, loop) or paced_by_python(facts, loop):
                continue  # its reads wait once per many steps, or while the Python generator makes the next batch
            if facts.runs_in_graph(loop.scope):
                continue  # a loop that builds a graph (a tf.function's, a TF 1 graph's) reads symbols, not values
            steps = self._step_calls(facts, loop)
            outputs = self._step_outputs(facts, loop, steps)
            if _next_input_needs_a_read(facts, loop, outputs):
                continue  # each step's input is built from the last step's value: the read cannot be deferred
            found = list(self._reads(facts, loop, outputs, steps, flagged))
            if found and not distributed_program(facts):
                return  # one device: the wait costs a dispatch gap the code does not show the size of
            if found:
                yield from self.one_for_all(found, "another read")

    def _reads(self, facts: ModuleFacts, loop: LoopFact, outputs: set[str], steps: set[int],
               flagged: set[int]) -> Iterator[Violation]:
        """Every read of the device in one training loop's body (`outputs`: the step's outputs; `steps`: the step
        calls, read where they are made: `print(train_step(x))`), each a finding."""
        read = False  # the first read of a step output waits for the step; the ones after it do not
        for call in loop.calls:
            if not call.loops or call.loops[-1] is not loop or gated_periodically(call):
                continue
            if id(call.statement) in flagged:
                continue
            if not read and self._syncs(call, outputs, steps) and not _feeds_the_next_batch(facts, loop, call):
                read = True
                flagged.add(id(call.statement))
                yield self.report(call, func=call.func or call.attr)
            elif self._reads_step_counter(call):
                flagged.add(id(call.statement))
                yield self.report(call, "counter", counter=dotted(call.receiver) or "iterations")
            elif not facts.runs_in_graph(call.scope) and (counter := self._reads_counter_variable(facts, call)):
                flagged.add(id(call.statement))
                yield self.report(call, "variable", counter=counter)
        tested = False  # likewise, an `if` after one that tested a step output does not wait again
        for branch in loop_ifs(facts, loop):
            if outputs and self._tests_output(branch, outputs) and not tested and not gated_if(branch):
                flagged.add(id(branch.node))
                yield self.report(branch.node.test, "branch", statement=branch.node)
            tested = tested or _always_reads(branch.node.test, outputs)
        yield from self._counter_tests(facts, loop, flagged)

    def _counter_tests(self, facts: ModuleFacts, loop: LoopFact, flagged: set[int]) -> Iterator[Violation]:
        """`if` tests and conditional expressions in the loop's body that turn a device step counter into a
        Python bool (`if tf.equal(self.global_step % n, 0):`, `True if (opt.iterations + 1) % n else False`)."""
        if facts.runs_in_graph(loop.scope):
            return  # AutoGraph turns the test into a graph conditional
        if isinstance(loop.node, cst.While) and id(loop.node) not in flagged:
            counter = next(counters_read(facts, loop.node.test, loop.scope, loop.order), None)
            if counter is not None:
                flagged.add(id(loop.node))
                yield self.report(loop.node.test, "test", statement=loop.node, what="the `while` test", counter=counter)
        for branch in loop_ifs(facts, loop):
            if id(branch.node) in flagged or gated_if(branch):
                continue
            counter = next(counters_read(facts, branch.node.test, branch.scope, branch.order), None)
            if counter is not None:
                flagged.add(id(branch.node))
                yield self.report(branch.node.test, "test", statement=branch.node, what="`if`", counter=counter)
        for assign in facts.assigns:
            if (not assign.loops or assign.loops[-1] is not loop or not isinstance(assign.value, cst.IfExp)
                    or id(assign.statement) in flagged):
                continue
            counter = next(counters_read(facts, assign.value.test, assign.scope, assign.order), None)
            if counter is not None:
                flagged.add(id(assign.statement))
                yield self.report(assign.value.test, "test", statement=assign.statement,
                                  what="this conditional expression", counter=counter)

    @staticmethod
    def _reads_step_counter(call: CallFact) -> bool:
        """`optimizer.iterations.numpy()` or `int(optimizer.iterations)`."""
        if call.attr == "numpy":
            return (dotted(call.receiver) or "").endswith(".iterations")
        return call.func in ("int", "float") and any(
            any(name.endswith(".iterations") for name in names) for names in call.arg_names[:1])

    @staticmethod
    def _reads_counter_variable(facts: ModuleFacts, call: CallFact) -> str | None:
        """`ckpt.step.numpy()`, `int(self.global_step)`: a step counter variable (not an optimizer's
        `iterations`, which has its own message) read back to the host."""
        if call.attr == "numpy" and call.receiver is not None:
            counter = step_counter(facts, call.receiver, call.scope, call.order)
        elif call.func in ("int", "float") and call.node.args:
            counter = step_counter(facts, call.node.args[0].value, call.scope, call.order)
        else:
            return None
        return counter if counter is not None and not counter.endswith(".iterations") else None

    @staticmethod
    def _tests_output(branch: IfFact, outputs: set[str]) -> bool:
        """An `if` that orders a step output against something (`if loss < best:`): a Python bool made from a
        device value."""
        test = branch.node.test
        if isinstance(test, cst.UnaryOperation):
            test = test.expression
        if isinstance(test, cst.Comparison):
            sides = [test.left, *(c.comparator for c in test.comparisons)]
            if not all(isinstance(c.operator, _ORDERINGS + _EQUALITIES) for c in test.comparisons) or any(
                    isinstance(side, (cst.SimpleString, cst.ConcatenatedString, cst.FormattedString))
                    or dotted(side) == "None" for side in sides):
                return False  # `is`/`in`, or against None or a string: a sentinel, not a device value
            return any(_name_reads(side, outputs) for side in sides)
        return False

    @staticmethod
    def _step_calls(facts: ModuleFacts, loop: LoopFact) -> set[int]:
        """The training step calls in the loop body (ids of their nodes), but for those whose results are already on
        the host, such as `train_on_batch`. Outside a module that distributes training, only steps that run a graph
        count (a single-device eager step pays far more in dispatch than in the wait)."""
        distributed = _distributed(facts)
        return {id(c.node) for c in loop.calls
                if calls_training_step(facts, c) and not returns_host_values(facts, c)
                and (distributed or _in_graph(facts, c))}

    @staticmethod
    def _step_outputs(facts: ModuleFacts, loop: LoopFact, step_calls: set[int]) -> set[str]:
        """Names assigned from a training step call in the loop body, and the losses a step written inline in the
        loop differentiates (`tape.gradient(loss_value, ...)`)."""
        outputs: set[str] = set()
        distributed = _distributed(facts)
        for assign in facts.assigns:
            if assign.loops and assign.loops[-1] is loop and isinstance(assign.value, cst.Call) and id(assign.value) in step_calls:
                outputs.update(assign.targets)
        for call in loop.calls if distributed else ():
            if call.loops and call.loops[-1] is loop and call.attr == "gradient" and call.node.args:
                name = dotted(call.node.args[0].value)
                if name is not None:
                    outputs.add(name)
        # Values computed from them in the loop are device values too (`total = total + loss`), unless a
        # read already brought them to the host (`value = float(loss)`).
        derived = [a for a in facts.assigns if a.loops and a.loops[-1] is loop and not _host_value(a.value)]
        grew = bool(outputs)
        while grew:
            grew = False
            for assign in derived:
                if not outputs.issuperset(assign.targets) and any(reads(assign.names, out) for out in outputs):
                    outputs.update(assign.targets)
                    grew = True
        return outputs

    @staticmethod
    def _syncs(call: CallFact, outputs: set[str], steps: set[int]) -> bool:
        if call.attr == "numpy":
            if id(call.receiver) in steps:
                return True
            # of an output, or of an op over one (`tf.reduce_mean(o).numpy() for o in outs`)
            read = expression_names(call.receiver, strings=False)
            seen = outputs | _comprehension_targets(call.statement, outputs)
            return any(reads(read, out) for out in seen)
        if call.func in _CONVERTERS:
            return (any(id(arg.value) in steps for arg in call.node.args)
                    or any(reads(names, out) for names in call.arg_names for out in outputs))
        return False


def _comprehension_targets(statement: cst.CSTNode, outputs: set[str]) -> set[str]:
    """The names a comprehension in the statement binds to the elements of a step output (`o` of `[... for o
    in outs]`)."""
    found: set[str] = set()
    for comp in m.findall(statement, m.CompFor()):
        assert isinstance(comp, cst.CompFor)
        if any(reads(expression_names(comp.iter, strings=False), out) for out in outputs):
            found |= expression_names(comp.target, strings=False)
    return found


def _feeds_the_next_batch(facts: ModuleFacts, loop: LoopFact, read: CallFact) -> bool:
    """Whether the value read goes into an object that the loop then draws a step's input from: prioritized
    replay (`replay.update_td_error(idx, loss.numpy())`, then `batch = sample_batch(replay)` feeds the step).
    The next batch waits for this value, so the read cannot be deferred."""
    consumer = next((c for c in loop.calls if c is not read and c.statement is read.statement and c.receiver is not None
                     and read.func is not None and any(read.func in names for names in c.arg_names)), None)
    store = _root_name(consumer.receiver) if consumer is not None else None
    if not store:
        return False
    step_inputs = [names for c in loop.calls if calls_training_step(facts, c) for names in c.arg_names]
    return any(a.loops and a.loops[-1] is loop and (drawn := facts.call_fact(a.value)) is not None
               and any(reads(names, store) for names in drawn.arg_names)
               and any(reads(names, target) for target in a.targets for names in step_inputs)
               for a in facts.assigns)


def _next_input_needs_a_read(facts: ModuleFacts, loop: LoopFact, outputs: set[str]) -> bool:
    """Whether the loop brings a step output to the host (`last = result.numpy()`) and builds the next step's
    input from it (`x = tf.random.uniform(shape, minval=last)`, then `step(x)`): a loop-carried value, as in
    reinforcement learning, that every step must wait for."""
    carried = {t for a in facts.assigns if a.loops and a.loops[-1] is loop and _brought_to_host(a.value, outputs)
               for t in a.targets}
    if not carried:
        return False
    step_inputs = [names for c in loop.calls if calls_training_step(facts, c) for names in c.arg_names]
    inputs = {t for a in facts.assigns if a.loops and a.loops[-1] is loop and any(reads(a.names, v) for v in carried)
              for t in a.targets} | carried
    return any(reads(names, name) for names in step_inputs for name in inputs)


def _brought_to_host(value: cst.BaseExpression | None, outputs: set[str]) -> bool:
    """`result.numpy()`, `float(loss)`: a step output read on the host."""
    if not isinstance(value, cst.Call) or not _host_value(value):
        return False
    if isinstance(value.func, cst.Attribute):
        return _name_reads(value.func.value, outputs)
    return any(_name_reads(arg.value, outputs) for arg in value.args)


def _root_name(expr: cst.CSTNode | None) -> str | None:
    """The variable an attribute or item chain starts from: `replays` for `replays[name].buffer`."""
    while isinstance(expr, (cst.Attribute, cst.Subscript)):
        expr = expr.value
    return expr.value if isinstance(expr, cst.Name) else None


def _distributed(facts: ModuleFacts) -> bool:
    """Whether the module distributes training: it makes or runs on a strategy, or is Horovod code."""
    return bool(facts.strategy_constructions or facts.run_calls) or horovod_module(facts)


def _in_graph(facts: ModuleFacts, call: CallFact) -> bool:
    """Whether a step call runs a graph: its function is a `tf.function`, or one the code does not show."""
    callee = facts.callee(call)
    return callee is None or facts.runs_in_graph(callee)


def _host_value(value: cst.BaseExpression | None) -> bool:
    """`float(x)`, `int(x)`, `x.numpy()`, `x.item()`: a value already on the host."""
    if not isinstance(value, cst.Call):
        return False
    if isinstance(value.func, cst.Attribute):
        return value.func.attr.value in ("numpy", "item", "tolist")
    return dotted(value.func) in _CONVERTERS


def _name_reads(expr: cst.BaseExpression, outputs: set[str]) -> bool:
    name = dotted(expr)
    return name is not None and any(reads({name}, out) for out in outputs)


def _always_reads(test: cst.BaseExpression, outputs: set[str]) -> bool:
    """Whether a test reads a step output every time it runs: in a comparison or arithmetic on it, or in the
    first operand of `and`/`or` (`hvd.rank() == 0 and step % N == 0` reads it on rank 0 only)."""
    if isinstance(test, cst.BooleanOperation):
        return _always_reads(test.left, outputs)
    if isinstance(test, cst.UnaryOperation):
        return _always_reads(test.expression, outputs)
    if isinstance(test, cst.Comparison):
        return any(_always_reads(side, outputs) for side in (test.left, *(c.comparator for c in test.comparisons)))
    if isinstance(test, cst.BinaryOperation):
        return _always_reads(test.left, outputs) or _always_reads(test.right, outputs)
    return _name_reads(test, outputs)
