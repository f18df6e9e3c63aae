"""The script's own `tf.data` input, found through the iterator its training loop read last, and a tuned copy
of it: the changes the input rules ask for, applied at run time to the dataset the script built.

Applied: `tf.data.Options` with autotuning and map parallelization (TFD202; it parallelises only stateless
map functions) and a final `prefetch(AUTOTUNE)` (TFD203). Not applied: moving `cache()` before the random
steps (TFD204) needs the pipeline rebuilt from its source, which only the script's author can do."""

from __future__ import annotations

import types
from typing import Any, Callable, Iterator

import tensorflow as tf
from tensorflow.python.data.ops import iterator_ops

from tfdoctor.profile.script.replay import Batch

Change = Callable[[tf.data.Dataset], tf.data.Dataset]  # a change to the script's pipeline, made on a copy
SOURCE = "_tfdoctor_source"  # what a distributed dataset (and its iterators) was made from, set by the hooks
TUNED_NOTE = ("the script's tf.data pipeline with tf.data.Options (autotune, map parallelization of stateless "
              "maps) and a final prefetch(AUTOTUNE); cache() placement is not changed at run time")


def tuned_options() -> tf.data.Options:
    """Autotuning, stateless maps run in parallel, and a prefetch injected where TensorFlow can."""
    options = tf.data.Options()
    options.autotune.enabled = True
    options.experimental_optimization.map_parallelization = True
    options.experimental_optimization.inject_prefetch = True
    return options


def tune(dataset: tf.data.Dataset) -> tf.data.Dataset:
    return dataset.with_options(tuned_options()).prefetch(tf.data.AUTOTUNE)


def tuned_copy(source: Any, captured: Batch) -> tuple[Iterator[Batch], Iterator[Batch], str] | str:
    """Two new iterators over the script's pipeline, as the script built it and tuned, each yielding the step's
    (args, kwargs); or why there are none."""
    plain = script_copy(source, captured)
    if isinstance(plain, str):
        return plain
    tuned = script_copy(source, captured, tune)
    assert not isinstance(tuned, str)  # the same source and batch as `plain`
    return plain, tuned, TUNED_NOTE


def script_copy(source: Any, captured: Batch, change: Change = lambda dataset: dataset) -> Iterator[Batch] | str:
    """A new iterator over the script's pipeline with `change` applied, yielding the step's (args, kwargs);
    or why there is none."""
    if source is None:
        return "the training loop read no tf.data iterator that the hooks saw"
    as_args = _arguments(captured)
    if as_args is None:
        return "the step's arguments are not the pipeline's elements as they come"
    made = _rebuilt(source, change)
    return made if isinstance(made, str) else _mapped(made, as_args)


def fit_source(strategy: Any, dataset: tf.data.Dataset) -> Any:
    """What `Model.fit` reads a dataset through under `strategy` (it distributes it), as a source
    `script_copy` takes."""
    return types.SimpleNamespace(**{SOURCE: (strategy, dataset, None, False)})


def _rebuilt(source: Any, change: Change) -> Iterator[Any] | str:
    recorded = getattr(source, SOURCE, None)
    if recorded is not None:  # a distributed dataset: distributed again, from the changed dataset
        strategy, dataset, options, from_function = recorded
        if from_function:
            return iter(strategy.distribute_datasets_from_function(lambda context: change(dataset(context)), options))
        return iter(strategy.experimental_distribute_dataset(change(dataset), options))
    if isinstance(source, iterator_ops.OwnedIterator) and getattr(source, "_dataset", None) is not None:
        return iter(change(source._dataset))  # noqa: SLF001 - the iterator's own dataset; no public accessor
    return "the training loop's iterator does not say which dataset it reads"


def _arguments(captured: Batch) -> Callable[[Any], Batch] | None:
    """How an element becomes the step's arguments: the one argument, or a tuple spread over them."""
    args, kwargs = captured
    if kwargs:
        return None
    if len(args) == 1:
        return lambda element: ((element,), {})
    return lambda element: (tuple(element), {}) if isinstance(element, tuple) and len(element) == len(args) else None


def _mapped(batches: Iterator[Any], as_args: Callable[[Any], Batch | None]) -> Iterator[Batch]:
    for element in batches:
        arguments = as_args(element)
        if arguments is None:
            raise ValueError("a pipeline element does not fit the step's arguments")
        yield arguments
