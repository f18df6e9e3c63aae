"""The Keras callback that times Model.fit's batches for a Recorder: script mode's hooks inject one into
every `fit` (Keras 3's, or Keras 2's through `tf_keras`), and the API's KerasCallback builds on it."""

from __future__ import annotations

import time
from types import ModuleType
from typing import Any

import keras

from tfdoctor.profile.script.recorder import Recorder


class _Timing:
    """Callback methods that report each `fit` batch as a step to a Recorder."""

    def __init__(self, recorder: Recorder | None = None) -> None:
        super().__init__()
        self.recorder = recorder
        self._start = 0.0

    def on_train_begin(self, logs: Any = None) -> None:
        if self.recorder:
            self.recorder.prefer("fit")

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        if self.recorder:  # epochs left: fit(initial_epoch=...) starts at that epoch
            self.recorder.epoch_begins((getattr(self, "params", None) or {}).get("epochs", 1) - epoch)

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        if self.recorder:
            self.recorder.epoch_ended(time.perf_counter())

    def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
        self._start = time.perf_counter()

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        if self.recorder:
            self.recorder.step("fit", self._start, time.perf_counter())


class StepCallback(_Timing, keras.callbacks.Callback):
    """Times Keras 3's Model.fit batches for a Recorder."""


_FOR: dict[str, type[_Timing]] = {"keras": StepCallback}


def step_callback(keras_module: ModuleType, recorder: Recorder) -> Any:
    """The timing callback for the `fit` of `keras_module` (`keras`, or `tf_keras`, whose fit takes only
    its own Callback subclasses)."""
    name = keras_module.__name__
    if name not in _FOR:
        _FOR[name] = type("LegacyStepCallback", (_Timing, keras_module.callbacks.Callback), {})
    return _FOR[name](recorder)


def is_step_callback(callback: Any) -> bool:
    return isinstance(callback, _Timing)
