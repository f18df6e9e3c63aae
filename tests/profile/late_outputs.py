"""A step whose outputs are ready at different times, as on a GPU: TensorFlow's asynchronous executor returns
from each op at once, the loss is ready first, and the last replica's output a known time later. Prints how
long `phases.timed` says the step took, and how long the late output takes.

    python tests/profile/late_outputs.py
"""

from __future__ import annotations

import json
import time

import tensorflow as tf

LATE_S = 0.5  # replica 1's output is ready this long after the step returns

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
tf.config.experimental.set_synchronous_execution(False)  # ops are queued and run in order, as on a GPU stream

from tfdoctor.profile.phases import timed  # noqa: E402 - after the devices are set up


def _late() -> float:
    time.sleep(LATE_S)
    return 1.0


def step():
    """(loss, gradients), as a step that returns its gradients: the loss first, then one gradient on each
    replica's device, replica 1's last and slow. (A per-replica value would not show the difference here:
    flattening one reads its components' shapes, which on this executor waits for them.)"""
    loss = tf.constant(2.0) * 0.5
    with tf.device("/cpu:0"):
        first = tf.constant(0.0) + 1.0
    with tf.device("/cpu:1"):
        last = tf.py_function(_late, [], tf.float32)
    return loss, [first, last]


step()[1][1].numpy()  # warm: py_function's first call
called = time.perf_counter()
outputs = step()
returned = time.perf_counter() - called
outputs[1][1].numpy()  # nothing left in the queue
print(json.dumps({"late_s": LATE_S, "call_s": returned, "timed_s": timed(step)}))
