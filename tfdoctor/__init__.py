"""tfdoctor: find and measure why distributed TensorFlow training is slow."""

__version__ = "0.1.0"
