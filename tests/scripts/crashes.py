"""Crashes before training: script mode must show the exit code and where it failed."""

import tensorflow as tf


def load_config(path):
    return {"batch": int(open(path).read())}


strategy = tf.distribute.MirroredStrategy()
config = load_config("/nonexistent/tfdoctor-config.txt")
