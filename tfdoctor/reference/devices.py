"""Replica devices for MirroredStrategy: real GPUs, one GPU split into logical GPUs, or logical CPUs.

Logical devices are fixed once TensorFlow initialises its runtime, so call ``setup_replicas`` before
any other TensorFlow work in the process (a later call may reuse devices already set up).
"""

from __future__ import annotations

from typing import Literal

import tensorflow as tf

DeviceKind = Literal["gpu", "virtual-gpu", "cpu"]
DEFAULT_GPU_MEMORY_MB = 4096  # per logical GPU when one GPU is split


class ReplicaSetupError(RuntimeError):
    """The requested replicas cannot be placed on this machine or in this process."""


def _split(device: tf.config.PhysicalDevice, count: int, memory_limit: int | None) -> None:
    config = [tf.config.LogicalDeviceConfiguration(memory_limit=memory_limit) for _ in range(count)]
    tf.config.set_logical_device_configuration(device, config)


def setup_replicas(
    n: int, gpu_memory_mb: int = DEFAULT_GPU_MEMORY_MB
) -> tuple[tf.distribute.MirroredStrategy, DeviceKind, list[str]]:
    """A MirroredStrategy over ``n`` replicas, the kind of device used, and the device names.

    ``n`` GPUs when there are that many; otherwise the first GPU split into ``n`` logical GPUs of
    ``gpu_memory_mb`` each; without a GPU, ``n`` logical CPU devices sharing the host's cores.
    """
    if n < 1:
        raise ReplicaSetupError(f"replicas must be at least 1, got {n}")
    gpus = tf.config.list_physical_devices("GPU")
    kind: DeviceKind = "gpu" if len(gpus) >= n else "virtual-gpu" if gpus else "cpu"
    try:
        if kind == "gpu":
            tf.config.set_visible_devices(gpus[:n], "GPU")
        elif kind == "virtual-gpu":
            tf.config.set_visible_devices(gpus[:1], "GPU")
            _split(gpus[0], n, gpu_memory_mb)
        else:
            _split(tf.config.list_physical_devices("CPU")[0], n, None)
    except RuntimeError:
        pass  # runtime already initialised: use its devices below if there are enough
    device_type = "CPU" if kind == "cpu" else "GPU"
    names = [d.name for d in tf.config.list_logical_devices(device_type)]
    if len(names) < n:
        raise ReplicaSetupError(
            f"TensorFlow already started with {len(names)} {device_type} device(s) in this process; "
            f"set up {n} replicas before any other TensorFlow work"
        )
    return tf.distribute.MirroredStrategy(names[:n]), kind, names[:n]
