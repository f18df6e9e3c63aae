"""Reference YOLOv3 workload: synthetic detection data, model, targets, loss, naive and tuned training.

Submodules import TensorFlow and OpenCV; this package's ``__init__`` and ``command`` do not.
"""
