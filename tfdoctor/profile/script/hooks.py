"""Patches that find a script's training steps and time its input waits, reporting to a Recorder.

Steps: top-level calls of `tf.function`s whose trace called `strategy.run`; eager `strategy.run` calls made
outside any tf.function; `Model.fit` batches through an injected callback. Input: `next()` on tf.data and
distributed iterators, batches of `keras.utils.PyDataset` (and `Sequence`) subclasses. Each patch costs two
`perf_counter` calls and a few attribute reads per call.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import time
import weakref
from types import ModuleType
from typing import Any, Callable, ClassVar

import tensorflow as tf
from tensorflow.python.data.ops import iterator_ops
from tensorflow.python.distribute import distribute_lib, input_lib, mirrored_strategy
from tensorflow.python.eager.polymorphic_function import polymorphic_function
from tensorflow.python.framework import func_graph, ops
from tensorflow.python.ops.control_flow_v2_func_graphs import WhileBodyFuncGraph

from tfdoctor.profile import distributed_next
from tfdoctor.profile.script import inputs, replay
from tfdoctor.profile.script.recorder import Recorder

HOOKED = ("tf.function steps that call strategy.run", "eager strategy.run", "Model.fit batches",
          "tf.data and distributed iterators", "keras PyDataset/Sequence batches")


class _State:
    recorder: Recorder | None = None
    calling: ClassVar[list[Any]] = []               # the top-level step call in progress (a Function or "run")
    steps: ClassVar[weakref.WeakSet] = weakref.WeakSet()  # Functions whose trace called strategy.run
    looping: ClassVar[weakref.WeakSet] = weakref.WeakSet()  # ... inside a loop of their own (many steps a call)
    devices: ClassVar[list[str]] = []               # the replicas of the last strategy that ran a step
    strategy: Any = None                            # that strategy
    fitting: str | None = None                      # the Keras module whose Model.fit is running
    installed = False


def install(recorder: Recorder, devices: list[str] | None = None) -> None:
    """Report to `recorder`; with `devices`, `MirroredStrategy()` without devices uses them."""
    _State.recorder = recorder
    recorder.hooked.update(HOOKED)
    if _State.installed:
        return
    _State.installed = True
    if devices:
        _default_devices(devices)
    _patch_function_call()
    _patch_strategy_run()
    _patch_all_reduce()
    _patch_iterators()
    _patch_distribution()
    _patch_keras()


def recorder() -> Recorder | None:
    return _State.recorder


def devices() -> list[str]:
    return _State.devices


def fitting() -> str | None:
    """`keras` or `tf_keras` while that Keras's Model.fit runs (or raises), else None."""
    return _State.fitting


def _default_devices(replicas: list[str]) -> None:
    original = mirrored_strategy.MirroredStrategy.__init__

    def __init__(self: Any, devices: Any = None, cross_device_ops: Any = None) -> None:
        original(self, devices if devices is not None else replicas, cross_device_ops)

    mirrored_strategy.MirroredStrategy.__init__ = __init__


def _idle() -> Recorder | None:
    """The recorder when a new top-level step may start here (eager, not replaying, no step running)."""
    rec = _State.recorder
    if rec is None or rec.done or rec.busy or _State.calling or ops.inside_function():
        return None
    return rec


def _patch_function_call() -> None:
    original = polymorphic_function.Function.__call__

    def __call__(self: Any, *args: Any, **kwargs: Any) -> Any:
        rec = _idle()
        if rec is None:
            return original(self, *args, **kwargs)
        _State.calling.append(self)
        start = time.perf_counter()
        try:
            out = original(self, *args, **kwargs)
        finally:
            _State.calling.pop()
        end = time.perf_counter()
        if self in _State.steps:
            looping = getattr(self, "__name__", "the step function") if self in _State.looping else None
            rec.step("tf.function", start, end, replay.of_function(self, args, kwargs, _State.strategy), key=id(self),
                     looping=looping)
        return out

    polymorphic_function.Function.__call__ = __call__


def _patch_strategy_run() -> None:
    original = distribute_lib.StrategyBase.run

    def run(self: Any, fn: Callable, args: tuple = (), kwargs: dict | None = None, options: Any = None) -> Any:
        _State.devices, _State.strategy = _worker_devices(self), self
        if ops.inside_function():
            if _State.calling and not isinstance(_State.calling[-1], str):
                _State.steps.add(_State.calling[-1])
                if _in_loop():
                    _State.looping.add(_State.calling[-1])
            if replay.COMPILED["on"]:
                fn = tf.function(fn, jit_compile=True)
            return original(self, fn, args, kwargs, options)
        rec = _idle()
        if rec is None:
            return original(self, fn, args, kwargs, options)
        _State.calling.append("run")
        start = time.perf_counter()
        try:
            out = original(self, fn, args, kwargs, options)
        finally:
            _State.calling.pop()
        rec.step("eager strategy.run", start, time.perf_counter(),
                 replay.of_eager_run(self, fn, tuple(args), dict(kwargs or {})))
        return out

    distribute_lib.StrategyBase.run = run


def _in_loop() -> bool:
    """Whether the graph being traced is the body of a loop inside the step function: a `tf.while_loop`
    (`for i in tf.range(n)`, `for x in distributed_dataset`) or a tf.data function (`for x in dataset`, which
    AutoGraph turns into a `scan`), so one call runs many steps (an epoch). A `tf.cond` branch is no loop."""
    graph = ops.get_default_graph()
    while isinstance(getattr(graph, "outer_graph", None), func_graph.FuncGraph):
        if isinstance(graph, WhileBodyFuncGraph) or graph.name.startswith("Dataset_"):  # tf.data's own naming
            return True
        graph = graph.outer_graph
    return False


def _worker_devices(strategy: Any) -> list[str]:
    try:
        return list(strategy.extended.worker_devices)
    except (RuntimeError, AttributeError):  # the default strategy has none
        return []


def _patch_all_reduce() -> None:
    original = distribute_lib.ReplicaContextBase.all_reduce

    def all_reduce(self: Any, reduce_op: Any, value: Any, options: Any = None) -> Any:
        if replay.PASSTHROUGH["on"]:
            return tf.nest.map_structure(tf.identity, value)
        return original(self, reduce_op, value, options)

    distribute_lib.ReplicaContextBase.all_reduce = all_reduce


TF_DATA = "tf.data"
SEQUENCE = "a Keras Sequence"


def _timed_input(original: Callable, kind: str) -> Callable:
    """`original` (one batch of input of `kind`) timed as input wait."""
    def timed(*args: Any, **kwargs: Any) -> Any:
        rec = _State.recorder
        if rec is None or rec.busy or ops.inside_function():
            return original(*args, **kwargs)
        start = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            rec.input_wait(time.perf_counter() - start, args[0] if args else None)
            rec.input_kind = rec.input_kind or kind  # Model.fit's own data comes first
    return timed


def _kind_of(data: Any) -> str:
    """What `Model.fit`'s data is, in words ('' for kinds no suggestion depends on)."""
    if isinstance(data, (tf.data.Dataset, input_lib.DistributedDataset, input_lib.DistributedDatasetsFromFunction)):
        return TF_DATA
    return SEQUENCE if any(cls.__name__ in ("Sequence", "PyDataset") for cls in type(data).__mro__) else ""


def _timed_distributed_input(original: Callable) -> Callable:
    """`next()` on a distributed iterator; in a multi-worker job its wait for the other workers is not
    input (distributed_next.py)."""
    plain = _timed_input(original, TF_DATA)

    def timed(self: Any) -> Any:
        rec = _State.recorder
        if rec is None or rec.busy or ops.inside_function() or not distributed_next.spans_workers(self):
            return plain(self)
        item, own, peers = distributed_next.split(lambda: original(self))
        rec.input_wait(own, self)
        rec.input_kind = rec.input_kind or TF_DATA
        rec.peer_wait(peers)
        return item
    return timed


def _patch_iterators() -> None:
    iterator_ops.OwnedIterator.__next__ = _timed_input(iterator_ops.OwnedIterator.__next__, TF_DATA)
    distributed = input_lib.DistributedIteratorBase
    distributed.__next__ = _timed_distributed_input(distributed.__next__)


def _patch_distribution() -> None:
    """Distributed datasets (and their iterators) remember what they were made from, for tf-data-tuned."""
    def remember(original: Callable, from_function: bool) -> Callable:
        def distribute(self: Any, dataset: Any, options: Any = None) -> Any:
            made = original(self, dataset, options)
            with contextlib.suppress(AttributeError):
                setattr(made, inputs.SOURCE, (self, dataset, options, from_function))
            return made
        return distribute

    strategy = distribute_lib.StrategyBase
    strategy.experimental_distribute_dataset = remember(strategy.experimental_distribute_dataset, False)
    strategy.distribute_datasets_from_function = remember(strategy.distribute_datasets_from_function, True)
    for cls in (input_lib.DistributedDataset, input_lib.DistributedDatasetsFromFunction):
        cls.__iter__ = _passing_source(cls.__iter__)


def _passing_source(original: Callable) -> Callable:
    def __iter__(self: Any) -> Any:
        iterator = original(self)
        source = getattr(self, inputs.SOURCE, None)
        if source is not None:
            with contextlib.suppress(AttributeError):
                setattr(iterator, inputs.SOURCE, source)
        return iterator
    return __iter__


def _patch_keras() -> None:
    import keras

    _patch_fit(keras)
    _LegacyKeras.install()


def _patch_fit(module: ModuleType) -> None:
    """Time the batches of `module`'s Model.fit (Keras 3's `keras`, Keras 2's `tf_keras`) and capture its
    step for the replays."""
    for cls in dict.fromkeys((getattr(module.utils, "PyDataset", module.utils.Sequence), module.utils.Sequence)):
        _time_subclass_batches(cls)
    original_fit = module.Model.fit

    def fit(self: Any, *args: Any, **kwargs: Any) -> Any:
        from tfdoctor.profile.script.step_callback import is_step_callback, step_callback

        rec = _State.recorder
        callbacks = list(kwargs.get("callbacks") or [])
        if rec is not None and not any(is_step_callback(c) for c in callbacks):
            kwargs["callbacks"] = [*callbacks, step_callback(module, rec)]
        if rec is not None and not rec.done:
            data, targets = (list(args) + [kwargs.get("x"), kwargs.get("y")][len(args):])[:2]
            rec.replay = replay.of_fit(self, data, targets, kwargs.get("batch_size"))
            rec.input_kind = _kind_of(data)
            if isinstance(data, tf.data.Dataset):  # fit reads it inside its step calls, where no hook sees it
                rec.input_source = inputs.fit_source(self.distribute_strategy, data)
            rec.new_iterator_each_epoch = rec.input_kind == TF_DATA and kwargs.get("steps_per_epoch") is None
        _State.fitting = module.__name__
        out = original_fit(self, *args, **kwargs)  # on an error, `fitting` stays set for the crash report
        _State.fitting = None
        return out

    module.Model.fit = fit


class _LegacyKeras(importlib.abc.MetaPathFinder):
    """Patches Keras 2 (`tf_keras`: `TF_USE_LEGACY_KERAS=1`, or imported by name) once the script imports
    it, so a script that never uses it does not pay for its import."""

    @classmethod
    def install(cls) -> None:
        if "tf_keras" in sys.modules:
            _patch_fit(sys.modules["tf_keras"])
        else:
            sys.meta_path.insert(0, cls())

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if name != "tf_keras":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        run = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            run(module)
            _patch_fit(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def _time_subclass_batches(base: type) -> None:
    """Every later subclass of `base` has its `__getitem__` (one batch) counted as input wait."""
    previous = base.__dict__.get("__init_subclass__")

    @classmethod  # type: ignore[misc]
    def __init_subclass__(cls: type, **kwargs: Any) -> None:
        if previous is not None:
            previous.__func__(cls, **kwargs)
        else:
            super(base, cls).__init_subclass__(**kwargs)
        if "__getitem__" in cls.__dict__:
            cls.__getitem__ = _timed_input(cls.__dict__["__getitem__"], SEQUENCE)

    base.__init_subclass__ = __init_subclass__
