"""TensorFlow knowledge over the semantic model: strategies, datasets, batches, losses, steps."""
