"""Profiling a job of several workers (MultiWorkerMirroredStrategy): TF_CONFIG, per-worker parts, merging."""
