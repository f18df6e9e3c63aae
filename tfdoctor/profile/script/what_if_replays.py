"""Script mode's measured what-if: each change tried on the step captured from the user's script, after its
window and replays, without editing the script (PROFILER.md, "Measured what-if").

Today is the captured step replayed on its captured batch (B), except for the input changes: input-on-device
sets the window's real steps beside B, and tf-data-tuned feeds the step from the script's own `tf.data`
pipeline, tuned, in blocks beside blocks fed by the pipeline as the script built it. A change that cannot be
applied to what the script did is reported with the reason."""

from __future__ import annotations

from typing import Any, Callable, Iterator

import tensorflow as tf
from tensorflow.python.distribute import values as values_lib

from tfdoctor.profile.collective_options import communication_options
from tfdoctor.profile.phases import in_one_graph, timed
from tfdoctor.profile.protocol import WhatIf
from tfdoctor.profile.script.inputs import tuned_copy
from tfdoctor.profile.script.replay import EAGER, Batch, Replay, examples, replicas_compiled
from tfdoctor.profile.trials import (BLOCK, BYTES_PER_PACK, CPU_MIXED, DRAIN, LOOPED, MIN_BLOCK_ROUNDS, MIN_ROUNDS,
                                     UNTIMED, Side, error_line, in_turns)

Progress = Callable[[str, int, int], None]
ROUNDS = 10
EAGER_WHY = "the step runs eagerly, so there is no graph to compile or trace again: wrap it in tf.function (TFD107)"


class ScriptTrials:
    """The requested changes on one captured step; `intervals` and `replayed` are the window's real steps and
    the same steps replayed on the captured batch (paired by index)."""

    def __init__(self, replay: Replay, intervals: list[float], replayed: list[float], device_kind: str,
                 across_workers: bool, source: Any, progress: Progress) -> None:
        self.replay, self.intervals, self.replayed = replay, intervals, replayed
        self.kind, self.across_workers, self.source, self.progress = device_kind, across_workers, source, progress
        self.examples = examples(replay.batch)

    def run(self, changes: list[str]) -> Iterator[WhatIf]:
        trials = {"input-on-device": self._input_on_device, "tf-data-tuned": self._tuned_input,
                  "batch-x2": self._batch_x2, "xla": self._xla, "mixed-precision": self._mixed_precision,
                  "all-reduce": self._all_reduce, "steps-per-call": self._steps_per_call}
        for change in changes:
            try:
                yield trials[change]()
            except tf.errors.ResourceExhaustedError as error:
                yield WhatIf(change, False, why_not=f"out of memory ({error_line(error)})", out_of_memory=True)
            except (tf.errors.OpError, ValueError, TypeError) as error:  # a change this step does not take
                yield WhatIf(change, False, why_not=f"the step failed with it ({error_line(error)})")

    def _today(self) -> float:
        return timed(lambda: self.replay.step(self.replay.batch))

    def _paired(self, change: str, changed: Callable[[], float], examples: int, note: str,
                calls_per_step: int = 1) -> WhatIf:
        for _ in range(UNTIMED):
            changed()
            self._today()
        today, tried = in_turns(f"what-if {change}", self._today, changed, ROUNDS, MIN_ROUNDS, self.progress,
                                not self.across_workers)
        return WhatIf(change, True, today, tried, self.examples, examples, calls_per_step,
                      note=f"{note}; both sides replay the captured step on a captured batch (no input)",
                      step_only=True)

    # -- the changes ------------------------------------------------------------------------------------------

    def _input_on_device(self) -> WhatIf:
        if not self.replayed:
            return WhatIf("input-on-device", False, why_not="the step was not replayed")
        return WhatIf("input-on-device", True, self.intervals, self.replayed, self.examples, self.examples,
                      note="the window's steps on the script's input, against each replayed on a captured batch")

    def _tuned_input(self) -> WhatIf:
        tuned = tuned_copy(self.source, self.replay.batch)
        if isinstance(tuned, str):
            return WhatIf("tf-data-tuned", False, why_not=tuned)
        today_batches, tuned_batches, note = tuned
        today_side, tuned_side = (Side.warmed(self.replay.step, batches, DRAIN)
                                  for batches in (today_batches, tuned_batches))
        today, tried = in_turns("what-if tf-data-tuned", lambda: today_side.steady(BLOCK, True),
                                lambda: tuned_side.steady(BLOCK, True), MIN_BLOCK_ROUNDS, MIN_BLOCK_ROUNDS,
                                self.progress, False)
        return WhatIf("tf-data-tuned", True, today, tried, self.examples, self.examples, note=note)

    def _batch_x2(self) -> WhatIf:
        doubled = _doubled(self.replay.batch)
        if doubled is None:
            return WhatIf("batch-x2", False, why_not="the captured batch has parts without a batch dimension")
        step = self.replay.fresh()
        return self._paired("batch-x2", lambda: timed(lambda: step(doubled)), self.examples * 2,
                            "each captured batch twice over: a larger batch changes the optimisation, so scale "
                            "the learning rate (with a warm-up) to keep convergence")

    def _xla(self) -> WhatIf:
        if self.replay.kind == EAGER:
            return WhatIf("xla", False, why_not=EAGER_WHY)
        step = self.replay.fresh()
        with replicas_compiled():
            timed(lambda: step(self.replay.batch))  # traced here: each replica's function with jit_compile
        return self._paired("xla", lambda: timed(lambda: step(self.replay.batch)), self.examples,
                            "the function each replica runs compiled with jit_compile=True")

    def _mixed_precision(self) -> WhatIf:
        if self.kind == "cpu":
            return WhatIf("mixed-precision", False, why_not=CPU_MIXED)
        return WhatIf("mixed-precision", False, why_not="the script builds its own model: set "
                      "keras.mixed_precision.set_global_policy('mixed_float16') before it does (with a "
                      "LossScaleOptimizer in a custom loop) and profile again")

    def _all_reduce(self) -> WhatIf:
        if self.replay.kind == EAGER:
            return WhatIf("all-reduce", False, why_not=EAGER_WHY)
        options = tf.distribute.experimental.CommunicationOptions(bytes_per_pack=BYTES_PER_PACK)
        step = self.replay.fresh()
        with communication_options(options):
            timed(lambda: step(self.replay.batch))  # traced here, with the options
        return self._paired("all-reduce: bytes_per_pack=32MiB", lambda: timed(lambda: step(self.replay.batch)),
                            self.examples, "CommunicationOptions(bytes_per_pack=32 MiB) on every all-reduce")

    def _steps_per_call(self) -> WhatIf:
        looped = in_one_graph(self.replay.step)
        count = tf.constant(LOOPED)
        return self._paired("steps-per-call", lambda: timed(lambda: looped(self.replay.batch, count)),
                            self.examples * LOOPED, f"{LOOPED} steps inside one tf.function call",
                            calls_per_step=LOOPED)


def _doubled(batch: Batch) -> Batch | None:
    """Each array of the batch joined to itself along the batch dimension (each replica's part, for values
    spread over replicas); None when some part has no batch dimension."""
    def double(value: Any) -> Any:
        if isinstance(value, values_lib.PerReplica):
            return values_lib.PerReplica(tuple(double(part) for part in value.values))
        if not hasattr(value, "shape") or not value.shape.rank:
            raise ValueError("no batch dimension")
        with tf.device(getattr(value, "device", "") or None):
            return tf.concat([value, value], axis=0)
    try:
        return tf.nest.map_structure(double, batch)
    except ValueError:
        return None
