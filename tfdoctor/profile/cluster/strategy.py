"""The strategy of one task in a multi-worker job: MultiWorkerMirroredStrategy from TF_CONFIG, on this host's
GPUs with NCCL, or on its CPU with the gRPC ring (imported only in the measuring child)."""

from __future__ import annotations

from typing import Callable

import tensorflow as tf

from tfdoctor.reference.devices import DeviceKind


def multi_worker_strategy(local_replicas: int) -> tuple[tf.distribute.Strategy, DeviceKind, list[str], str]:
    """The strategy, the kind of device, this worker's devices and the collective implementation. Call it
    before any other TensorFlow work: the strategy sets up the collective runtime."""
    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        tf.config.set_visible_devices(gpus[:local_replicas], "GPU")
    kind: DeviceKind = "gpu" if gpus else "cpu"
    implementation = (tf.distribute.experimental.CommunicationImplementation.NCCL if gpus
                      else tf.distribute.experimental.CommunicationImplementation.RING)
    strategy = tf.distribute.MultiWorkerMirroredStrategy(
        communication_options=tf.distribute.experimental.CommunicationOptions(implementation=implementation))
    return strategy, kind, list(strategy.extended.worker_devices), implementation.name


def agreed_largest(strategy: tf.distribute.Strategy, most: int) -> Callable[[int], int]:
    """`agree(count)`: the largest `count` (0 to `most`) any worker of the job gave; every worker calls it at
    the same point, since it is an all-reduce (of a one-hot vector: the strategy sums, it has no maximum)."""
    @tf.function
    def summed(one_hot: tf.Tensor) -> tf.Tensor:
        return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(lambda: tf.identity(one_hot)), axis=None)

    def agree(count: int) -> int:
        given = summed(tf.one_hot(min(count, most), most + 1)).numpy()
        return max(index for index, total in enumerate(given) if total > 0)
    return agree
