"""Small workloads with injected ground truth, loaded by the profiler's worker process
(`workload="tests.profile.workloads:build"`). Each reports its independently measured ground truth in a
note `ground-truth <part> <seconds>`."""

from __future__ import annotations

import json
import os
import statistics
import time
from typing import Any, Callable

import tensorflow as tf

from tfdoctor.profile.phases import wait
from tfdoctor.profile.workload import StepFunctions
from tfdoctor.reference.train import touch

FEATURES, WIDTH, PER_REPLICA = 256, 512, 32


def _timed(function: Callable[[], Any]) -> float:
    start = time.perf_counter()
    wait(function())
    return time.perf_counter() - start


def _paired_difference(slower: Callable[[], Any], faster: Callable[[], Any], repeats: int = 200) -> tuple[float, float]:
    """Median of (slower - faster) over calls made in turn, so drift of the machine cancels out, and the
    median of `slower` alone."""
    wait(slower())
    wait(faster())
    pairs = [(_timed(slower), _timed(faster)) for _ in range(repeats)]
    return statistics.median(s - f for s, f in pairs), statistics.median(s for s, _ in pairs)


def _task_index() -> int:
    """This process's task index in its multi-worker job (TF_CONFIG), 0 outside one."""
    return int(json.loads(os.environ.get("TF_CONFIG", "{}")).get("task", {}).get("index", 0))


def build(strategy: tf.distribute.Strategy, params: dict[str, Any]) -> StepFunctions:
    """A two-layer MLP under `strategy`, plus what `params["inject"]` asks for: `input_delay` (seconds of
    sleep per batch in a Python input), `payload_mb` (an extra all-reduce per step), `eager` (no
    tf.function around the distributed step), `oom` (out of memory above `fits` examples per replica, in the
    `oom_variant` only when given), or `crash`; with `task`, only that task of a multi-worker job gets it.
    A payload's added time is timed apart as the ground truth unless `sync_truth` is False.
    `input=distributed`: every task reads its batches through `distribute_datasets_from_function` from a
    `from_generator` source (where `input_delay` sleeps), as multi-worker scripts do."""
    inject = params.get("inject", "none")
    if "task" in params and _task_index() != int(params["task"]):
        inject = "none"  # a multi-worker job where only one worker has the injected fault
    if inject == "crash":
        raise RuntimeError("injected crash on this worker")
    replicas = strategy.num_replicas_in_sync
    per_replica = int(params.get("batch_per_replica", PER_REPLICA))
    global_batch = per_replica * replicas
    if inject == "oom" and per_replica > int(params["fits"]) and params.get("oom_variant") in (None, params["variant"]):
        # Exhausting real memory here would endanger the machine; raise what TensorFlow raises then.
        raise tf.errors.ResourceExhaustedError(None, None, f"OOM when allocating tensor with shape[{per_replica},{WIDTH}]")
    with strategy.scope():
        model = tf.keras.Sequential([tf.keras.Input((FEATURES,)), tf.keras.layers.Dense(WIDTH, activation="relu"),
                                     tf.keras.layers.Dense(WIDTH, activation="relu"), tf.keras.layers.Dense(1)])
        optimizer = tf.keras.optimizers.SGD(1e-3)
        optimizer.build(model.trainable_variables)
    payload = tf.ones([int(params.get("payload_mb", 0) * 2**18)]) if inject == "payload" else None
    data = tf.data.Dataset.from_tensor_slices((tf.random.normal([global_batch * 4, FEATURES], seed=1),
                                               tf.random.normal([global_batch * 4, 1], seed=2)))
    device_batch = next(iter(strategy.experimental_distribute_dataset(data.repeat().batch(global_batch))))

    def loss_and_gradients(x, y):
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(tf.square(model(x) - y)[:, 0], global_batch_size=global_batch)
        return loss, tape.gradient(loss, model.trainable_variables)

    def reduce(grads, with_payload=True):
        context = tf.distribute.get_replica_context()
        reduced = context.all_reduce(tf.distribute.ReduceOp.SUM, grads)
        if payload is None or not with_payload:
            return reduced
        with tf.control_dependencies(grads):  # after the backward pass, as gradient all-reduces are
            extra = context.all_reduce(tf.distribute.ReduceOp.SUM, tf.identity(payload))
        with tf.control_dependencies([extra]):  # the step waits for the extra all-reduce
            return [tf.identity(g) for g in reduced]

    def replica_step(x, y, with_payload=True):
        loss, grads = loss_and_gradients(x, y)
        optimizer.apply_gradients(zip(reduce(grads, with_payload), model.trainable_variables))
        return loss

    def step(batch, with_payload=True):
        per_replica = strategy.run(replica_step, args=(*batch, with_payload))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    def gradients(batch, all_reduce):
        def replica(x, y):
            loss, grads = loss_and_gradients(x, y)
            return loss, touch(reduce(grads) if all_reduce else grads)
        loss, grads = strategy.run(replica, args=batch)
        return strategy.reduce(tf.distribute.ReduceOp.SUM, loss, axis=None), grads

    graph_step = tf.function(step)
    notes = []
    delay = float(params["input_delay"]) if inject == "input_delay" else 0.0
    if params.get("input") == "distributed":
        x, y = (tensor.numpy() for tensor in data.batch(per_replica).take(1).get_single_element())

        def examples():
            while True:
                time.sleep(delay)
                yield x, y

        def per_worker(context: tf.distribute.InputContext) -> tf.data.Dataset:
            spec = (tf.TensorSpec(x.shape, tf.float32), tf.TensorSpec(y.shape, tf.float32))
            return tf.data.Dataset.from_generator(examples, output_signature=spec)

        def batches():
            return iter(strategy.distribute_datasets_from_function(per_worker))
    elif inject == "input_delay":
        notes.append(f"ground-truth input {delay}")

        def batches():
            while True:
                time.sleep(delay)  # a slow Python input: decoding in the training thread
                yield device_batch
    else:
        def batches():
            while True:
                yield device_batch
    if inject == "payload" and params.get("sync_truth", True):  # what the extra all-reduce adds to a step
        plain = tf.function(lambda b: step(b, with_payload=False))
        added, _ = _paired_difference(lambda: graph_step(device_batch), lambda: plain(device_batch))
        notes.append(f"ground-truth sync {added}")
    if inject == "eager":
        # The overhead is Python on the host: it scales with the machine's speed, which can change by 20%
        # between this measurement and the profile's, so the eager step's own time is noted beside it.
        overhead, eager_step = _paired_difference(lambda: step(device_batch), lambda: graph_step(device_batch))
        notes.append(f"ground-truth host-step {eager_step}")
        notes.append(f"ground-truth host {overhead}")
    return StepFunctions(
        name=f"mlp ({inject})", replicas=replicas, global_batch=global_batch, batches=batches,
        step=step if inject == "eager" else graph_step, device_batch=device_batch,
        gradients=tf.function(lambda b: gradients(b, False)), reduced_gradients=tf.function(lambda b: gradients(b, True)),
        per_replica_batch=per_replica, notes=notes,
    )
