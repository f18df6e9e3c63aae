"""Prints a line, then waits forever for something that never comes (a peer, a lock, a queue)."""

import threading

import tensorflow as tf

print("waiting for the batch queue", tf.constant(1).numpy(), flush=True)
threading.Event().wait()
