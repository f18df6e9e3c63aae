"""Runs out of memory (raised as TensorFlow raises it: exhausting this machine's memory would endanger it)."""

import tensorflow as tf

strategy = tf.distribute.MirroredStrategy()
raise tf.errors.ResourceExhaustedError(None, None, "OOM when allocating tensor with shape[4096,4096,64]")
