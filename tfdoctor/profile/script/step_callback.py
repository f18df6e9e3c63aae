"""The Keras callback that times Model.fit's batches for a Recorder: script mode's hooks inject one into
every `fit`, and the API's KerasCallback builds on it."""

from __future__ import annotations

import time
from typing import Any

import keras

from tfdoctor.profile.script.recorder import Recorder


class StepCallback(keras.callbacks.Callback):
    """Times Model.fit's batches for a Recorder (script mode injects one into every fit)."""

    def __init__(self, recorder: Recorder | None = None) -> None:
        super().__init__()
        self.recorder = recorder
        self._start = 0.0

    def on_train_begin(self, logs: Any = None) -> None:
        if self.recorder:
            self.recorder.prefer("fit")

    def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
        self._start = time.perf_counter()

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        if self.recorder:
            self.recorder.step("fit", self._start, time.perf_counter())
