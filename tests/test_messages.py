"""Every message is one short sentence saying what and where (the why is on the rule page), filled from the
rule's templates: exact positions and messages of each rule's INVALID examples."""

from __future__ import annotations

import re

import pytest

from tests.conftest import lint_text
from tests.test_rule_examples import _targets
from tfdoctor.lint.rule import all_rules, rule_by_code

# (code, INVALID example index, line, column, message)
EXPECTED = [
    ('TFD101', 0, 2, 12, '`multi_gpu_model` copies the model onto each GPU by hand; use `tf.distribute.MirroredStrategy`'),
    ('TFD101', 1, 2, 5, '`multi_gpu_model` copies the model onto each GPU by hand; use `tf.distribute.MirroredStrategy`'),
    ('TFD101', 2, 2, 5, '`multi_gpu_model` copies the model onto each GPU by hand; use `tf.distribute.MirroredStrategy`'),
    ('TFD101', 3, 2, 12, '`multi_gpu_model` copies the model onto each GPU by hand; use `tf.distribute.MirroredStrategy`'),
    ('TFD101', 4, 4, 16, ("standalone Keras's `multi_gpu_model` on a `tf.keras` model fails from TensorFlow 2.1 on; "
                         "use `tf.distribute.MirroredStrategy`")),
    ('TFD102', 0, 7, 17, '`tf.split` splits the input of replica function `train_step` again'),
    ('TFD102', 1, 4, 14, '`tf.unstack` splits the input of replica function `fwd` again'),
    ('TFD102', 2, 8, 27, 'slicing by a per-GPU size splits the input of replica function `replica_fn` again'),
    ('TFD103', 0, 13, 16, '`self.strategy.run` gets batches from the Python iterator class `Batches`, not from a distributed dataset'),
    ('TFD103', 1, 5, 1, '`strategy.run` gets batches from a numpy array, not from a distributed dataset'),
    ('TFD103', 2, 9, 5, '`strategy.run` gets batches from the Python generator `batches`, not from a distributed dataset'),
    ('TFD103', 3, 6, 12, '`strategy.run` gets batches from a `tf.data.Dataset` that was never distributed, not from a distributed dataset'),
    ('TFD104', 0, 7, 20, 'the loss of replica function `train_step` is an unscaled sum, so N GPUs at the same per-replica batch take N times larger steps'),
    ('TFD104', 1, 4, 20, 'the loss of replica function `replica` is a per-replica mean, so its summed gradients are N times too large'),
    ('TFD104', 2, 6, 16, 'the loss of replica function `replica` is a default-reduction Keras loss, so its summed gradients are N times too large (Keras 2.15 assumed: test)'),
    ('TFD104', 3, 3, 12, 'the loss of replica function `replica` is a per-replica mean, so its summed gradients are N times too large'),
    ('TFD104', 4, 8, 20, 'the loss of replica function `replica_step` is a per-replica mean, so with N GPUs the gradients clipped by `tf.clip_by_global_norm` are N times larger'),
    ('TFD104', 5, 5, 16, 'the loss of replica function `replica` is an unscaled sum; `Adam` hardly minds, but the sum it reports grows with N'),
    ('TFD104', 6, 4, 16, 'the loss of replica function `replica` is a per-replica mean, so its summed gradients are N times too large'),
    ('TFD105', 0, 6, 7, '`opt` (a Keras optimizer) is created outside `strategy.scope()` but is used in the replica function `replica` (Keras 3.0 assumed: test)'),
    ('TFD105', 1, 6, 22, '`self.model` (a Keras model) is created outside `strategy.scope()` but is used in the replica function `train_step`'),
    ('TFD105', 2, 5, 7, '`acc` (a Keras metric) is created outside `strategy.scope()` but is used in the replica function `replica` (Keras 3.0 assumed: test)'),
    ('TFD105', 3, 4, 13, '`optimizer` (a Keras optimizer) is created outside `strategy.scope()` but is given to `compile` inside `strategy.scope()` (Keras 3.0 assumed: test)'),
    ('TFD106', 0, 6, 9, '`batch(64)` feeds a strategy but does not scale with `num_replicas_in_sync`'),
    ('TFD106', 1, 6, 15, '`batch(BATCH_PER_GPU)` feeds a strategy but does not scale with `num_replicas_in_sync`'),
    ('TFD106', 2, 4, 52, '`batch(batch_size)` feeds a strategy but does not scale with `num_replicas_in_sync`'),
    ('TFD106', 3, 9, 27, '`batch(self.config.batch_size)` feeds a strategy but does not scale with `num_replicas_in_sync`'),
    ('TFD106', 4, 4, 28, '`image_dataset_from_directory(batch_size)` feeds a strategy but does not scale with `num_replicas_in_sync`'),
    ('TFD107', 0, 7, 13, '`self.strategy.run` is called eagerly from `fit`, which is not a `tf.function` (nor only called from one)'),
    ('TFD107', 1, 4, 5, '`strategy.run` is called eagerly from module-level code, outside any `tf.function`'),
    ('TFD107', 2, 4, 12, '`strategy.experimental_run_v2` is called eagerly from `dist_step`, which is not a `tf.function` (nor only called from one)'),
    ('TFD107', 3, 11, 12, '`strategy.run` is called eagerly from `dist_step`, which is not a `tf.function` (nor only called from one)'),
    ('TFD108', 0, 11, 16, '`ReduceOp.SUM` over per-replica mean losses reports a loss N times too large'),
    ('TFD108', 1, 8, 12, '`ReduceOp.MEAN` over losses already scaled by the global batch reports a loss N times too small'),
    ('TFD108', 2, 10, 15, '`ReduceOp.SUM` over per-replica mean losses reports a loss N times too large'),
    ('TFD108', 3, 14, 12, '`ReduceOp.SUM` over per-replica mean losses reports a loss N times too large'),
    ('TFD109', 0, 4, 10, 'a loop builds one model copy per GPU under `tf.device` (TF1 towers); use `MirroredStrategy`'),
    ('TFD109', 1, 5, 14, 'a loop builds one model copy per GPU under `tf.device` (TF1 towers); use `MirroredStrategy`'),
    ('TFD109', 2, 3, 10, 'a loop builds one model copy per GPU under `tf.device` (TF1 towers); use `MirroredStrategy`'),
    ('TFD109', 3, 4, 10, 'a loop builds one model copy per GPU under `tf.device` (TF1 towers); use `MirroredStrategy`'),
    ('TFD109', 4, 7, 10, 'a loop builds one model copy per GPU under `tf.device` (TF1 towers); use `MirroredStrategy`'),
    ('TFD109', 5, 5, 10, 'a loop builds one model copy per GPU under `tf.device` (TF1 towers); use `MirroredStrategy`'),
    ('TFD109', 6, 5, 18, 'a loop builds one model copy per GPU under `tf.device` (TF1 towers); use `MirroredStrategy` '
                         '(another per-GPU loop at line 9)'),
    ('TFD110', 0, 6, 14, "`tf.device('/device:GPU:0')` in replica function `train_step` puts every replica on one device"),
    ('TFD110', 1, 4, 10, "`tf.device('GPU:1')` in replica function `fwd` puts every replica on one device"),
    ('TFD111', 0, 7, 12, '`MirroredStrategy` over logical GPUs of one GPU keeps the default all-reduce, which NCCL cannot do'),
    ('TFD111', 1, 5, 12, '`MirroredStrategy` over logical GPUs of one GPU keeps the default all-reduce, which NCCL cannot do'),
    ('TFD112', 0, 7, 24, 'every GPU tower is given the same batch `images_batch`, so each computes the same gradients'),
    ('TFD112', 1, 7, 22, 'every GPU tower is given the same batch `x`, so each computes the same gradients'),
    ('TFD112', 2, 6, 22, 'every GPU tower is given the same batch `x`, so each computes the same gradients'),
    ('TFD112', 3, 9, 33, 'every GPU tower is given the same batch `self.images`, so each computes the same gradients'),
    ('TFD113', 0, 3, 5, ('the template of this `multi_gpu_model` is not placed on the CPU, so GPU 0 holds its weights; '
                 'build it under `tf.device("/cpu:0")`')),
    ('TFD113', 1, 3, 12, ('the template of this `multi_gpu_model` is not placed on the CPU, so GPU 0 holds its weights; '
                 'build it under `tf.device("/cpu:0")`')),
    ('TFD114', 0, 4, 81, '`batch(BATCH_SIZE)` is split among the strategy\'s replicas; if sized for one device, scale it with `num_replicas_in_sync`'),
    ('TFD114', 1, 4, 51, '`batch(16)` is split among the strategy\'s replicas; if sized for one device, scale it with `num_replicas_in_sync`'),
    ('TFD115', 0, 4, 16, '`strategy` is never entered, only asked its replica count, so the model trains on one device; build it in `strategy.scope()`'),
    ('TFD115', 1, 4, 16, '`tpu_strategy` is never entered, only asked its replica count, so the model trains on one device; build it in `tpu_strategy.scope()`'),
    ('TFD201', 0, 5, 6, 'training is fed by `Dataset.from_generator`, one Python thread under the GIL; use a `tf.data` pipeline'),
    ('TFD201', 1, 9, 11, 'training is fed by the Python `Sequence` class `Loader`, one Python thread under the GIL; use a `tf.data` pipeline'),
    ('TFD201', 1, 10, 21, 'training is fed by the Python `Sequence` class `Loader`, one Python thread under the GIL; use a `tf.data` pipeline'),
    ('TFD201', 2, 8, 11, 'training is fed by `ImageDataGenerator.flow`, one Python thread under the GIL; use a `tf.data` pipeline'),
    ('TFD201', 2, 9, 11, 'training is fed by the Python generator `batches`, one Python thread under the GIL; use a `tf.data` pipeline'),
    ('TFD201', 3, 9, 26, 'training is fed by the Python iterator class `Reader`, one Python thread under the GIL; use a `tf.data` pipeline'),
    ('TFD201', 4, 6, 27, 'training is fed by `feed_dict` batches from Python, one Python thread under the GIL; use a `tf.data` pipeline'),
    ('TFD201', 4, 9, 18, 'training is fed by `feed_dict` batches from Python, one Python thread under the GIL; use a `tf.data` pipeline'),
    ('TFD201', 5, 9, 11, 'training is fed by the Python `Sequence` class `Tiles`, 4 Python threads under the GIL; use a `tf.data` pipeline'),
    ('TFD201', 5, 10, 11, 'training is fed by the Python `Sequence` class `Tiles` in Python threads or worker processes, as `use_multiprocessing` says; use a `tf.data` pipeline'),
    ('TFD201', 5, 12, 15, 'training is fed by the Python `Sequence` class `Tiles` in Python threads or worker processes, as `use_multiprocessing` says; use a `tf.data` pipeline'),
    ('TFD201', 5, 14, 11, 'training is fed by the Python `Sequence` class `Tiles`, one Python thread under the GIL; use a `tf.data` pipeline'),
    ('TFD201', 6, 6, 11, 'training is fed by `ImageDataGenerator.flow_from_directory`, one Python thread under the GIL; use a `tf.data` pipeline'),
    ('TFD201', 7, 9, 5, 'training is fed by `Dataset.from_generator`, one Python thread under the GIL; use a `tf.data` pipeline'),
    ('TFD201', 8, 8, 27, 'training is fed by `feed_dict` batches from Python, one Python thread under the GIL; use a `tf.data` pipeline'),
    ('TFD201', 9, 9, 21, 'training is fed by the Python generator `batches` in worker processes, each replaying it, so '
                         'batches repeat; make it a `keras.utils.Sequence`'),
    ('TFD201', 10, 10, 24, "training is fed by the Python `Sequence` class `Tiles`, 4 Python threads under the GIL; this Keras's `fit` takes no `tf.data`, so try `use_multiprocessing=True`"),
    ('TFD201', 11, 10, 11, 'training is fed by the Python `Sequence` class `Tiles`, one Python thread under the GIL; use a `tf.data` pipeline'),
    ('TFD201', 12, 14, 6, 'training is fed by `Dataset.from_generator`, one Python thread under the GIL; use a `tf.data` pipeline'),
    ('TFD201', 13, 9, 15, 'training is fed by `ImageDataGenerator.flow_from_directory`, one Python thread under the GIL; use a `tf.data` pipeline'),
    ('TFD201', 14, 11, 11, 'training is fed by `ImageDataGenerator.flow_from_directory`, one Python thread under the GIL; use a `tf.data` pipeline'),
    ('TFD201', 15, 6, 6, 'training is fed by `Dataset.from_generator`, one Python thread under the GIL; use a `tf.data` pipeline'),
    ('TFD202', 0, 4, 9, '`map` in a training pipeline runs on one core; add `num_parallel_calls=T.data.AUTOTUNE`'),
    ('TFD202', 1, 6, 18, '`interleave` in a training pipeline runs on one core; add `num_parallel_calls=data.AUTOTUNE`'),
    ('TFD202', 2, 9, 48, '`map` in a training pipeline runs on one core; add `num_parallel_calls=tf.data.AUTOTUNE`'),
    ('TFD202', 3, 7, 19, '`map` in a training pipeline runs on one core; add `num_parallel_calls=tf.data.AUTOTUNE`'),
    ('TFD202', 4, 5, 9, '`map` in a training pipeline runs on one core; add `num_parallel_calls=tf.data.AUTOTUNE`'),
    ('TFD202', 5, 6, 48, '`map` in a training pipeline runs on one core; add `num_parallel_calls=tf.data.AUTOTUNE`'),
    ('TFD202', 6, 8, 44, '`map` in a training pipeline runs on one core; add `num_parallel_calls=tf.data.experimental.AUTOTUNE`'),
    ('TFD203', 0, 6, 9, 'this training pipeline does not end in `prefetch`, so input and compute do not overlap; append `.prefetch(tf.data.AUTOTUNE)` (TF 2.11 assumed: test)'),
    ('TFD203', 1, 5, 76, 'this training pipeline does not end in `prefetch`, so input and compute do not overlap; append `.prefetch(tf.data.AUTOTUNE)` (TF 2.11 assumed: test)'),
    ('TFD203', 2, 5, 72, 'this training pipeline does not end in `prefetch`, so input and compute do not overlap; append `.prefetch(tf.data.AUTOTUNE)` (TF 2.11 assumed: test)'),
    ('TFD203', 3, 7, 59, 'this training pipeline does not end in `prefetch`, so input and compute do not overlap; append `.prefetch(tf.data.AUTOTUNE)` (TF 2.11 assumed: test)'),
    ('TFD203', 4, 6, 48, 'this training pipeline does not end in `prefetch`, so input and compute do not overlap; append `.prefetch(tf.data.AUTOTUNE)` (TF 2.21 assumed: newest release)'),
    ('TFD203', 5, 7, 70, 'this training pipeline does not end in `prefetch`, so input and compute do not overlap; append `.prefetch(tf.data.AUTOTUNE)` (TF 2.4 assumed: test)'),
    ('TFD203', 6, 5, 76, 'this training pipeline does not end in `prefetch`, so input and compute do not overlap; append `.prefetch(tf.data.AUTOTUNE)` (TF 2.4 assumed: test)'),
    ('TFD204', 0, 4, 62, '`cache()` after `map` freezes or breaks it; move `cache()` before `map`'),
    ('TFD204', 1, 4, 9, '`cache()` after `repeat` freezes or breaks it; move `cache()` before `repeat`'),
    ('TFD204', 2, 2, 85, '`cache()` after `map` freezes or breaks it; move `cache()` before `map`'),
    ('TFD204', 3, 6, 31, '`cache()` after `shuffle` freezes or breaks it; move `cache()` before `shuffle`'),
    ('TFD204', 4, 3, 26, '`prefetch` before `cache()` overlaps input and step in the first epoch only; move it after `cache()`'),
    ('TFD204', 5, 3, 35, '`cache()` after `repeat` freezes or breaks it; move `cache()` before `repeat`'),
    ('TFD205', 0, 2, 61, '`T.py_function` in a `tf.data` transformation runs Python under the GIL; use TF ops'),
    ('TFD205', 1, 6, 16, '`tf.py_func` in a `tf.data` transformation runs Python under the GIL; use TF ops'),
    ('TFD205', 2, 4, 16, '`tf.py_func` in a `tf.data` transformation runs Python under the GIL; use TF ops'),
    ('TFD206', 0, 7, 13, '`batches` builds a float64 batch; build it as `np.float32`'),
    ('TFD206', 1, 5, 15, '`Loader.__getitem__` builds a float64 batch; build it as `np.float32`'),
    ('TFD206', 2, 6, 15, '`batches` builds a float64 batch; build it as `np.float32`'),
    ('TFD207', 0, 4, 9, '`shuffle` after `batch` shuffles whole batches; shuffle before batching'),
    ('TFD207', 1, 3, 70, '`shuffle` after `batch` shuffles whole batches; shuffle before batching'),
    ('TFD207', 2, 2, 79, '`shuffle` after `batch` shuffles whole batches; shuffle before batching'),
    ('TFD207', 3, 2, 84, '`shuffle` after `batch` shuffles whole batches; shuffle before batching'),
    ('TFD209', 0, 13, 15, 'this `run` takes another batch from `iterator.get_next()` on every step, besides the one the training run uses'),
    ('TFD209', 1, 11, 15, 'this `run` takes another batch from `iterator.get_next()` on every step, besides the one the training run uses'),
    ('TFD208', 0, 4, 4, 'the dataset `shuffle` returns is discarded, so `ds` stays unchanged; assign the result'),
    ('TFD208', 1, 4, 13, 'the dataset `map` returns is discarded, so `dataset` stays unchanged; assign the result'),
    ('TFD208', 1, 6, 13, 'the dataset `prefetch` returns is discarded, so `dataset` stays unchanged; assign the result'),
    ('TFD208', 2, 4, 13, 'the dataset `repeat` returns is discarded, so `dataset` stays unchanged; assign the result'),
    ('TFD208', 3, 3, 8, 'the dataset `map` returns is discarded, so `val_ds` stays unchanged; assign the result'),
    ('TFD208', 4, 7, 8, 'the dataset `with_options` returns is discarded, so `ds` stays unchanged; assign the result'),
    ('TFD208', 5, 3, 28, 'the dataset `batch` returns is discarded, so `ds` stays unchanged; assign the result'),
    ('TFD301', 0, 10, 28, '`float()` reads a step output on every iteration of the training loop'),
    ('TFD301', 1, 9, 5, '`print()` reads a step output on every iteration of the training loop'),
    ('TFD301', 2, 7, 12, "`optimizer.iterations.numpy()` reads the optimizer's step counter on every iteration of the training loop (another read at line 9)"),
    ('TFD301', 3, 7, 22, "`optimizer.iterations.numpy()` reads the optimizer's step counter on every iteration of the training loop"),
    ('TFD301', 4, 9, 26, '`float()` reads a step output on every iteration of the training loop'),
    ('TFD301', 5, 8, 8, '`if` compares a step output on every iteration of the training loop'),
    ('TFD301', 6, 9, 8, '`if` reads the step counter `global_step` on every iteration of the training loop'),
    ('TFD301', 7, 8, 19, '`ckpt.step` is read back from the device on every iteration of the training loop'),
    ('TFD301', 8, 6, 7, 'the `while` test reads the step counter `iterations` on every iteration of the training loop '
                        '(another read at line 7)'),
    ('TFD301', 9, 7, 23, 'this conditional expression reads the step counter `optimizer.iterations` on every iteration of the training loop'),
    ('TFD301', 10, 6, 5, '`print()` reads a step output on every iteration of the training loop'),
    ('TFD301', 11, 7, 15, '`numpy()` reads a step output on every iteration of the training loop'),
    ('TFD302', 0, 3, 1, '`mixed_float16` with a custom training loop and no `LossScaleOptimizer`'),
    ('TFD302', 1, 3, 1, '`mixed_float16` with a custom training loop and no `LossScaleOptimizer`'),
    ('TFD303', 0, 9, 5, '`apply_gradients` in `micro_step` runs on every micro-batch of an accumulated step'),
    ('TFD303', 1, 8, 9, '`apply_gradients` in `train` runs on every micro-batch of an accumulated step'),
    ('TFD303', 2, 6, 9, '`apply_gradients` in `step` runs on every micro-batch of an accumulated step'),
    ('TFD304', 0, 9, 9, '`self.opt` is first built inside the distributed step `replica`; build it in `strategy.scope()` (Keras 3.15 assumed: test)'),
    ('TFD304', 1, 5, 53, '`opt` is first built inside the distributed step `<lambda>`; build it in `strategy.scope()` (Keras 3.0 assumed: test)'),
    ('TFD304', 2, 6, 5, '`opt` is first built inside one of the distributed steps `step_fn`, `reg_step_fn`; build it in `strategy.scope()` (Keras 3.15 assumed: test)'),
    ('TFD305', 0, 8, 14, 'this `tf.device` block holds only numpy/Python work, which it does not place'),
    ('TFD305', 1, 3, 6, 'this `tf.device` block holds only numpy/Python work, which it does not place'),
    ('TFD306', 0, 8, 13, '`tape.gradient` differentiates `step_loss`, from only one of the losses appended to `losses`; differentiate their sum or mean'),
    ('TFD306', 1, 6, 12, '`optimizer.minimize` differentiates `tower_losses[-1]`, from only one of the losses appended to `tower_losses`; differentiate their sum or mean'),
    ('TFD307', 0, 7, 9, '`train_step` is a `tf.function` given the Python int `epoch`, so each new value traces it again; pass a tensor'),
    ('TFD307', 1, 9, 13, '`self.step` is a `tf.function` given the Python int `i + 1`, so each new value traces it again; pass a tensor'),
    ('TFD401', 0, 2, 11, '`fit_generator` is removed in Keras 3; use `fit` (Keras 3.15 assumed: newest release)'),
    ('TFD401', 0, 3, 10, '`evaluate_generator` is removed in Keras 3; use `evaluate` (Keras 3.15 assumed: newest release)'),
    ('TFD401', 1, 2, 1, '`fit` arguments `use_multiprocessing`, `workers` are removed in Keras 3; pass them to a `keras.utils.PyDataset` (Keras 3.15 assumed: newest release)'),
    ('TFD401', 2, 5, 1, '`fit_generator` is removed in Keras 3; use `fit` (Keras 3.15 assumed: newest release)'),
    ('TFD402', 0, 9, 13, 'this default-reduction loss in `replica` is divided again by the replicas, which Keras already does (Keras 3.15 assumed: newest release)'),
    ('TFD402', 1, 5, 12, 'this default-reduction loss in `replica` is divided again by the replicas, which Keras already does (Keras 3.8 assumed: test)'),
    ('TFD403', 0, 4, 18, '`get_scaled_loss` is removed in Keras 3; use `optimizer.scale_loss(loss)` (Keras 3.15 assumed: newest release)'),
    ('TFD403', 1, 4, 5, '`get_unscaled_gradients` is removed in Keras 3; drop it, `apply_gradients` unscales the gradients itself (Keras 3.0 assumed: test)'),
    ('TFD501', 0, 5, 9, 'every worker builds this whole `from_generator` dataset to keep 1/N of it; shard the source or use `distribute_datasets_from_function`'),
    ('TFD501', 1, 4, 10, 'every worker builds this whole `range` dataset to keep 1/N of it; shard the source or use `distribute_datasets_from_function`'),
    ('TFD501', 2, 3, 6, 'every worker builds this whole `from_tensor_slices` dataset to keep 1/N of it; shard the source or use `distribute_datasets_from_function`'),
    ('TFD502', 0, 5, 50, 'sharding is turned off and nothing calls `shard(...)`, so every worker trains on the same examples'),
    ('TFD502', 1, 4, 46, 'sharding is turned off and nothing calls `shard(...)`, so every worker trains on the same examples'),
    ('TFD502', 2, 4, 53, 'sharding is turned off and nothing calls `shard(...)`, so every worker reads every example, in its own shuffled order'),
    ('TFD502', 3, 8, 53, 'sharding is turned off and nothing calls `shard(...)`, so every worker reads every example, in its own shuffled order'),
    ('TFD503', 0, 8, 5, 'every worker writes this checkpoint to the same path; use a temporary directory on the other workers'),
    ('TFD503', 0, 9, 10, 'every worker writes summaries to the same logs; give the other workers a temporary directory'),
    ('TFD503', 0, 10, 1, 'every worker saves this model to the same path; save to a temporary directory on the other workers'),
    ('TFD503', 1, 5, 14, "every worker's Keras 3 callback writes to one path, which clashes on a shared host or disk; give the others a temporary directory"),
    ('TFD503', 2, 4, 26, "every worker's Keras 3 callback writes the same files; give the other workers a temporary directory (Keras 3.8 assumed: test)"),
    ('TFD503', 3, 6, 9, 'every worker saves this model to the same path; save to a temporary directory on the other workers'),
    ('TFD503', 4, 5, 18, 'every worker writes summaries to the same logs; give the other workers a temporary directory'),
    ('TFD503', 5, 5, 1, 'every worker saves this model to one path, which clashes on a shared host or disk; use a temporary directory on the others'),
    ('TFD503', 5, 7, 1, 'every worker writes this checkpoint to one path, which clashes on a shared host or disk; use a temporary directory on the others'),
    ('TFD503', 5, 8, 10, 'every worker writes summaries to one log folder, which clashes on a shared host or disk; give the others a temporary directory'),
    ('TFD504', 0, 4, 16, '`MultiWorkerMirroredStrategy` is created after `tf.constant` started the TensorFlow runtime; create it first'),
    ('TFD504', 1, 4, 12, '`MultiWorkerMirroredStrategy` is created after `tf.config.list_logical_devices` started the TensorFlow runtime; create it first'),
    ('TFD504', 2, 5, 16, '`MultiWorkerMirroredStrategy` is created after `tfds.load` started the TensorFlow runtime; create it first'),
    ('TFD505', 0, 9, 5, 'this scheduled function reads a dataset distributed on the coordinator, not one made by `create_per_worker_dataset`'),
    ('TFD505', 1, 7, 1, 'this scheduled function reads a `tf.data.Dataset` made on the coordinator, not one made by `create_per_worker_dataset`'),
    ('TFD506', 0, 10, 5, 'neither `hvd.DistributedGradientTape` nor `hvd.DistributedOptimizer` averages these gradients'),
    ('TFD506', 1, 4, 1, 'this optimizer is not wrapped in `hvd.DistributedOptimizer`, so Horovod never averages the gradients'),
    ('TFD506', 2, 8, 15, "this branch's optimizer is not wrapped in `hvd.DistributedOptimizer`, unlike the other branch's"),
    ('TFD507', 0, 11, 5, 'no `hvd.broadcast_variables` follows the first step, so the ranks start from different weights'),
    ('TFD507', 1, 7, 1, 'this `fit` gets no `BroadcastGlobalVariablesCallback(0)`, so the ranks start from different weights'),
    ('TFD507', 2, 3, 1, 'this `fit` gets no `BroadcastGlobalVariablesCallback(0)`, so the ranks start from different weights'),
    ('TFD507', 3, 14, 5, 'no `hvd.broadcast_variables` follows the first step, so the ranks start from different weights'),
    ('TFD507', 4, 10, 5, 'no `hvd.broadcast_variables` follows the first step, so the ranks start from different weights '
                         '(another step at line 11)'),
    ('TFD508', 0, 5, 7, 'this learning rate is not scaled by `hvd.size()` and nothing warms it up'),
    ('TFD508', 1, 6, 7, 'this learning rate is not scaled by `hvd.size()` and nothing warms it up'),
    ('TFD508', 2, 5, 11, 'this learning rate is not scaled by `hvd.size()` and nothing warms it up'),
    ('TFD509', 0, 4, 5, 'no GPU is pinned to `hvd.local_rank()` after `hvd.init()`, so every process on a host uses GPU 0'),
    ('TFD509', 1, 3, 1, 'no GPU is pinned to `hvd.local_rank()` after `hvd.init()`, so every process on a host uses GPU 0'),
    ('TFD509', 2, 2, 1, 'no GPU is pinned to `hvd.local_rank()` after `hvd.init()`, so every process on a host uses GPU 0'),
    ('TFD509', 3, 3, 1, 'no GPU is pinned to `hvd.local_rank()` after `hvd.init()`, so every process on a host uses GPU 0'),
    ('TFD509', 4, 4, 1, 'no GPU is pinned to `hvd.local_rank()` after `hvd.init()`, so every process on a host uses GPU 0'),
    ('TFD510', 0, 7, 1, 'every Horovod rank writes this checkpoint to the same path; save it under `if hvd.rank() == 0`'),
    ('TFD510', 0, 8, 10, 'every Horovod rank writes summaries to the same logs; create the writer under `if hvd.rank() == 0`'),
    ('TFD510', 1, 6, 5, 'every Horovod rank saves this model to the same path; save it under `if hvd.rank() == 0`'),
    ('TFD510', 2, 4, 13, "every Horovod rank writes this callback's files to the same path; add it under `if hvd.rank() == 0`"),
    ('TFD511', 0, 4, 6, 'every Horovod rank reads this whole dataset; shard it by `hvd.rank()` or divide the steps by `hvd.size()`'),
    ('TFD511', 1, 4, 12, 'every Horovod rank reads this whole dataset; shard it by `hvd.rank()` or divide the steps by `hvd.size()`'),
    ('TFD511', 2, 6, 11, 'every Horovod rank trains on all of these arrays; slice them by `hvd.rank()` or divide the epochs by `hvd.size()`'),
    ('TFD511', 3, 4, 11, 'every Horovod rank reads this whole dataset; shard it by `hvd.rank()` or divide the steps by `hvd.size()`'),
    ('TFD512', 0, 4, 12, '`MultiWorkerMirroredStrategy` is created before line 5 sets `TF_CONFIG`, so it never joins that cluster'),
    ('TFD512', 1, 4, 12, '`MultiWorkerMirroredStrategy` is created before line 6 sets `TF_CONFIG`, so it never joins that cluster'),
    ('TFD512', 2, 4, 12, '`MultiWorkerMirroredStrategy` is created before line 6 sets `TF_CONFIG`, so it never joins that cluster'),
    ('TFD513', 0, 10, 5, 'only some workers run this save, which reads batch-norm statistics from every worker, so it blocks, then fails (Keras 2.15 assumed: test)'),
    ('TFD513', 1, 9, 5, 'only some workers run this Keras 2 `model.save`, which joins a collective of every worker, so it blocks, then fails (Keras 2.15 assumed: test)'),
    ('TFD513', 2, 9, 5, 'only some workers run this Keras 2 `save_weights`, which joins a collective of every worker, so it blocks, then fails (Keras 2.15 assumed: test)'),
    ('TFD513', 3, 9, 5, 'only some workers run this save, which reads sync-on-read variables from every worker, so it blocks, then fails'),
    ('TFD514', 0, 4, 6, '`shard` takes the index `0` on every worker, so every worker reads the same shard'),
    ('TFD514', 1, 6, 6, '`shard` takes `hvd.local_rank()`, which repeats on every host, so ranks on different hosts read the same shard; use `hvd.rank()`'),
    ('TFD514', 2, 8, 12, "`shard` takes the coordinator's `task_id`, so every worker reads the same shard"),
    ('TFD515', 0, 6, 10, "`LearningRateWarmupCallback` sets the rate from `initial_lr=lr`, the rate before the optimizer's scaling by the worker count"),
    ('TFD515', 1, 9, 5, "`LearningRateWarmupCallback` sets the rate from `initial_lr=args.base_lr`, the rate before the optimizer's scaling by the worker count"),
    ('TFD515', 1, 10, 5, "`LearningRateScheduleCallback` sets the rate from `initial_lr=args.base_lr`, the rate before the optimizer's scaling by the worker count"),
    ('TFD515', 2, 6, 26, "`LearningRateWarmupCallback` sets the rate from `initial_lr=base_lr`, the rate before the optimizer's scaling by the worker count"),
    ('TFD516', 0, 7, 6, 'the hooks of this `MonitoredTrainingSession` hold no `hvd.BroadcastGlobalVariablesHook(0)`, so the ranks start from different weights'),
    ('TFD516', 1, 10, 1, 'the hooks of this `train` hold no `hvd.BroadcastGlobalVariablesHook(0)`, so the ranks start from different weights'),
    ('TFD516', 2, 9, 9, 'no `hvd.broadcast_global_variables(0)` is run before this training loop, so the ranks start from different weights'),
    ('TFD516', 3, 12, 5, 'the hooks of this `train` hold no `hvd.BroadcastGlobalVariablesHook(0)`, so the ranks start from different weights'),
    ('TFD517', 0, 4, 14, 'this broadcast callback never runs, because the model trains with `train_on_batch`, not `fit`'),
    ('TFD517', 1, 4, 18, 'this broadcast callback never runs, because the model trains with `train_on_batch`, not `fit`'),
    ('TFD518', 0, 7, 1, '`model.fit` fails under Keras 3 for a model built in the `MultiWorkerMirroredStrategy` scope at line 4 (Keras 3 assumed: test)'),
    ('TFD518', 0, 8, 1, '`model.evaluate` fails under Keras 3 for a model built in the `MultiWorkerMirroredStrategy` scope at line 4 (Keras 3 assumed: test)'),
    ('TFD518', 1, 14, 5, '`multi_worker_model.fit` fails under Keras 3 for a model built in the `MultiWorkerMirroredStrategy` scope at line 12 (Keras 3.8 assumed: test)'),
    ('TFD518', 2, 7, 11, '`model.fit` fails under Keras 3 for a model built in the `MultiWorkerMirroredStrategy` scope at line 4 (Keras 3 assumed: test)'),
]


@pytest.mark.parametrize("code", sorted({row[0] for row in EXPECTED}))
def test_messages_of_the_invalid_examples(code):
    rule = rule_by_code(code)
    found = [
        (code, index, f.line, f.column, f.message)
        for index, example in enumerate(rule.INVALID)
        for f in lint_text(example, select=(code,), **_targets(example))
    ]
    assert found == [row for row in EXPECTED if row[0] == code]


# (code, INVALID example index, severity) where a finding's severity follows the consequence its message states
SEVERITIES = [
    ("TFD104", 1, "error"),  # an optimizer the code does not show: the step grows N times
    ("TFD104", 4, "warning"),  # an adaptive optimizer whose gradients are clipped
    ("TFD104", 5, "info"),  # an adaptive optimizer, no clipping: only a reported sum grows
    ("TFD201", 0, "warning"),  # one Python thread
    ("TFD201", 6, "warning"),
]


def test_a_python_feed_in_worker_processes_is_left_alone_in_threads_reported():
    example = rule_by_code("TFD201").INVALID[5]
    assert [(f.line, f.severity.value) for f in lint_text(example, select=("TFD201",))] == [
        (9, "warning"), (10, "warning"), (12, "warning"), (14, "warning")]
    processes = next(valid for valid in rule_by_code("TFD201").VALID if "use_multiprocessing=True)" in valid)
    assert lint_text(processes, select=("TFD201",)) == []


@pytest.mark.parametrize("code, index, severity", SEVERITIES)
def test_severity_follows_the_stated_consequence(code, index, severity):
    example = rule_by_code(code).INVALID[index]
    assert {f.severity.value for f in lint_text(example, select=(code,), **_targets(example))} == {severity}


@pytest.mark.parametrize("rule", [r for r in all_rules() if r.code != "TFD000"], ids=lambda r: r.code)
def test_templates_are_one_short_sentence_and_each_is_exercised(rule):
    assert rule.MESSAGES, "a rule words its findings with MESSAGES templates"
    messages = [row[4] for row in EXPECTED if row[0] == rule.code]
    for template in rule.MESSAGES.values():
        assert len(template) <= 130 and ": " not in template and ". " not in template and not template.endswith(".")
        pattern = re.escape(template)
        pattern = re.sub(r"\\{[^}]*\\}", ".+", pattern)
        assert any(re.match(pattern, message) for message in messages), template
