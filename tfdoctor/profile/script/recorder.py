"""The step window of a running script: W warm-up steps, K measured step-to-step intervals, the replays,
an optional trace of a few more steps, then one result (protocol.ScriptMeasured, or NoStep) and the what-if
changes.

TensorFlow's profiler can crash the process while it collects a multi-worker trace (protocol.Traced), so the
replayed result is sent before the trace: a crash then costs the trace alone."""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

from tfdoctor.profile.machine_load import CpuSample, load_note, sample
from tfdoctor.profile.protocol import (
    EpochBoundary, InputTurns, NoStep, PhaseTimes, ScriptMeasured, Traced, WhatIf,
)
from tfdoctor.profile.script.lines_run import LinesRun
from tfdoctor.profile.script.replay import Replay, measure

Progress = Callable[[str, int, int], None]
LOOPED = ("`{}` runs strategy.run in a loop inside one tf.function call (an epoch, or many steps, per call): each "
          "step measured here is one such call, and the input it reads inside the loop counts as compute")
OTHER_STEPS = ("{:.0f} ms per step ran in other step functions between the measured ones (a test or "
               "evaluation step): counted with the step, not as input")
FIRST_EPOCH_S = 60.0  # the longest warm-up through fit's first epoch; a longer first epoch holds the window
FIRST_EPOCH = ("the window opened in fit's second epoch: the first ({} steps) was the warm-up (a first epoch is "
               "not the steady state: caches and shuffle buffers fill, and its steps ran slower in some runs)")
LONG_FIRST_EPOCH = (f"fit's first epoch ran longer than {FIRST_EPOCH_S:.0f} s: the window opened inside it, where "
                    "caches and shuffle buffers may still be filling")
UNREPLAYED = ("the process ended after the window, before the step was replayed (in the replays, when another "
              "worker had died): host overhead and all-reduce are not separated")


class Recorder:
    """Collects step boundaries from whichever hook reports first (one source only, so nothing is counted
    twice) and, once the window is complete, measures the replays and hands the result to `on_done`. What
    comes before it with a trace (the window's result unreplayed, then the trace) goes to `on_partial`."""

    def __init__(self, steps: int, warmup: int, on_done: Callable[[ScriptMeasured | NoStep], None], progress: Progress,
                 trace_dir: str | None = None, trace_steps: int = 3, across_workers: bool = False,
                 on_partial: Callable[[ScriptMeasured | Traced | WhatIf], None] = lambda event: None,
                 what_if: list[str] | None = None, device_kind: str = "cpu", lines_run: LinesRun | None = None) -> None:
        self.steps, self.warmup, self.on_done, self.on_partial, self.progress = (steps, warmup, on_done, on_partial,
                                                                                progress)
        self.across_workers = across_workers  # a worker of a multi-worker job (replay.measure)
        self.trace_dir, self.trace_steps = trace_dir, trace_steps
        self.source: str | None = None
        self.key: object = None          # which step function of that source counts (a script's first one)
        self.looped: list[str] = []      # step functions that run strategy.run in a loop of their own
        self._others: dict[object, int] = {}  # calls of the other step functions of that source
        self._other_time = 0.0           # seconds in those calls since the last counted step
        self.other_steps: list[float] = []  # ... per measured interval: neither input nor the step
        self._cpu: list[CpuSample | None] = []  # the machine's CPU counters when the window opened and closed
        self.seen = 0
        self.through_epoch = False       # the warm-up runs to the end of fit's first epoch
        self.first_epoch = 0             # that epoch's steps, once it ended in the warm-up
        self._first_seen = 0.0           # when the first step ended
        self._last_end: float | None = None   # when the last counted step call ended
        self._epoch_end: float | None = None  # when fit's last epoch ended, until the next one's first step
        self.between_epochs: list[EpochBoundary] = []
        self.new_iterator_each_epoch = False  # fit's data is a dataset that ends each epoch
        self.warmed = 0                  # the steps before the window
        self.starts: list[float] = []    # starts of the measured steps (K + 1 of them)
        self.calls: list[float] = []     # how long each measured step call took
        self.waits: list[float] = []     # hooked input waits in each measured interval
        self.peer_waits: list[float] = []  # waits for other workers inside hooked input calls, per interval
        self._wait = self._peer_wait = 0.0
        self.replay: Replay | None = None
        self.hooked: set[str] = set()
        self.busy = False                # replaying: the hooks must not report
        self.done = False
        self.deadline = float("inf")
        self._traced = -1                # steps traced so far; -1 while no trace runs
        self._step_mark: Any = None      # the profiler's step annotation in progress
        self.what_if, self.device_kind = what_if or [], device_kind
        self.input_source: Any = None    # the iterator the training loop read last (tf-data-tuned)
        self.input_kind = ""             # what the step's batches came from, as the hooks saw it
        self.measured: ScriptMeasured | NoStep | None = None  # the window's result, once replayed
        self.lines_run = lines_run       # the script's lines run, recorded until the window opens

    def prefer(self, source: str) -> None:
        """Use `source` for the step boundaries (Model.fit's callback over the Function inside fit)."""
        if self.source is None:
            self.source = source

    def epoch_begins(self, epochs_left: int) -> None:
        """A Model.fit epoch begins, this one and `epochs_left - 1` more to train: in the first, with more to
        follow, the warm-up runs to its end (for at most FIRST_EPOCH_S), so that the window measures the
        epochs that follow."""
        if epochs_left > 1 and self.seen == 0:
            self.through_epoch = True

    def epoch_ended(self, at: float) -> None:
        """A Model.fit epoch ended at `at` (perf_counter seconds)."""
        if self._last_end is not None:
            self._epoch_end = at
        if self.through_epoch and not self.starts:
            self.through_epoch, self.first_epoch = False, self.seen

    def _warming(self, now: float) -> bool:
        """Still in the warm-up: its W steps, or fit's first epoch while it lasts at most FIRST_EPOCH_S."""
        if self.seen == 1:
            self._first_seen = now
        return self.seen <= self.warmup or (self.through_epoch and now - self._first_seen < FIRST_EPOCH_S)

    def input_wait(self, seconds: float, source: Any = None) -> None:
        self._wait += seconds
        if source is not None:
            self.input_source = source

    def peer_wait(self, seconds: float) -> None:
        """`seconds` inside an input call spent waiting for other workers (a multi-worker `next()`)."""
        self._peer_wait += seconds

    def step(self, source: str, start: float, end: float, replay: Replay | None = None, key: object = None,
             looping: str | None = None) -> None:
        """A training step call ran from `start` to `end` (perf_counter seconds); `key` tells apart the step
        functions of one source (a script's train and test functions): the first one seen counts. `looping`:
        the name of a step function that runs strategy.run in a loop of its own (many steps a call)."""
        if self.done or self.busy:
            return
        self.source = self.source or source
        if source == self.source and key != self.key:
            if self.key is None:
                self.key = key
            else:  # another step function: it counts instead only when the first ran less often, in the warm-up
                self._others[key] = self._others.get(key, 0) + 1
                if self._others[key] <= self.seen or self.seen > self.warmup:
                    self._other_time += end - start  # a test step between training steps: not input
                    return
                self.key, self.seen = key, self._others.pop(key) - 1  # the first was a set-up call
        if replay is not None:
            self.replay = replay
        if source != self.source:
            return
        if looping and looping not in self.looped:
            self.looped.append(looping)
        self.seen += 1
        if self._epoch_end is not None and self._last_end is not None:
            self.between_epochs.append(EpochBoundary(self._epoch_end - self._last_end, start - self._epoch_end))
            self._epoch_end = None
        self._last_end = end
        (wait, peer, other) = self._wait, self._peer_wait, self._other_time
        self._wait = self._peer_wait = self._other_time = 0.0
        if self._traced >= 0:
            self._traced += 1
            self._mark_trace_step()
            if self._traced >= self.trace_steps:
                self.finish()
            return
        if not self.starts and self._warming(end):
            self.progress("warm-up steps", self.seen, max(self.warmup, self.seen))  # fit: its whole first epoch
            return
        if self.starts:
            self.waits.append(wait)
            self.peer_waits.append(peer)
            self.other_steps.append(other)
        else:
            if self.lines_run is not None:
                self.lines_run.stop()  # the window runs untraced
            self._cpu = [sample()]
            self.warmed = self.seen - 1
        self.starts.append(start)
        self.calls.append(end - start)
        self.progress("measured steps", len(self.starts) - 1, self.steps)
        if len(self.starts) > self.steps or (time.perf_counter() > self.deadline and len(self.starts) > 1):
            self._close_window()

    def _close_window(self) -> None:
        """Replay the step, then trace a few more steps (or finish). The window's result goes out before the
        replays (a worker whose peer died can hang in them) and again with them before the trace (which
        TensorFlow's profiler sometimes crashes), so each can cost only what follows it."""
        self.busy = True
        self._cpu.append(sample())
        if self.trace_dir and self.trace_steps or self.across_workers:
            self.on_partial(self._result(None, replay=False))
        self.measured = self._result(None)
        self.busy = False
        if self.trace_dir and self.trace_steps:
            self.on_partial(self.measured)
            self._start_trace()
        else:
            self.finish()

    def finish(self, ended: str | None = None) -> None:
        """Stop any trace and report (the window's replayed result, or the steps seen when the script stopped
        early: `ended` says why), then try the what-if changes."""
        if self.done:
            return
        self.done = self.busy = True
        if self._traced >= 0:
            self.on_partial(Traced(self._stop_trace()))
        result = self.measured or self._result(ended)
        if self.what_if and isinstance(result, ScriptMeasured) and self.replay is not None and result.replayed:
            self.on_partial(result)  # sent first: a change that takes the process down costs only the what-if
            self._try_changes(result)
        self.on_done(result)

    def _try_changes(self, result: ScriptMeasured) -> None:
        from tfdoctor.profile.script.what_if_replays import ScriptTrials

        assert self.replay is not None
        trials = ScriptTrials(self.replay, result.times.full, result.replay_steps, self.device_kind,
                              self.across_workers, self.input_source, self.progress)
        for tried in trials.run(self.what_if):
            self.on_partial(tried)

    def _result(self, ended: str | None, replay: bool = True) -> ScriptMeasured | NoStep:
        """The window's result, its step replayed unless `replay` is False (sent ahead of a trace)."""
        intervals = [b - a for a, b in zip(self.starts, self.starts[1:])]
        if not intervals:
            return NoStep(self.seen, sorted(self.hooked), ended)
        waits = self.waits[:len(intervals)]
        calls = ([a - w for a, w in zip(intervals, waits)] if self.source == "marker"  # a marker has no duration
                 else self.calls[:len(intervals)])
        notes = [LOOPED.format(name) for name in self.looped]
        if self.first_epoch > self.warmup:
            notes.append(FIRST_EPOCH.format(self.first_epoch))
        elif self.through_epoch:
            notes.append(LONG_FIRST_EPOCH)
        others = self.other_steps[:len(intervals)]
        if others and statistics.median(others) > 0:  # the other step functions' time goes with the step's
            calls = [call + other for call, other in zip(calls, others)]
            notes.append(OTHER_STEPS.format(statistics.median(others) * 1000))
        loaded = load_note(self._cpu[0], self._cpu[1] if len(self._cpu) > 1 else sample())
        if loaded:
            notes.append(loaded)
        if ended and len(intervals) < self.steps:
            notes.append(f"the script {ended} after {self.seen} steps: {len(intervals)} of {self.steps} measured")
        replayed, turns = None, None
        if self.replay and replay:
            before = sample()
            replayed = measure(self.replay, intervals, calls, self.progress, notes, self.across_workers)
            if replayed is not None and self.replay.input_inside and not self.across_workers:
                turns = self._input_in_turns(notes)
            loaded = load_note(before, sample(), "the step was replayed (host overhead and all-reduce come from "
                               "the replays)")
            notes.extend([loaded] if loaded else [])
        if replayed is None:
            notes.append(UNREPLAYED if not replay else (
                f"no step could be replayed on a captured batch (steps seen through {self.source}): input is the "
                "time between step calls and the hooked input waits, the rest compute; host overhead and all-reduce "
                "are not separated"))
            on_device = [min(c, a - w) for a, c, w in zip(intervals, calls, waits)]
            times = PhaseTimes(intervals, waits, on_device, [statistics.median(on_device)], [0.0], [0.0])
            global_batch, replicas = 0, 0
        else:
            times = PhaseTimes(intervals, waits, replayed.on_device, replayed.looped, replayed.gradients,
                               replayed.reduced)
            global_batch, replicas = replayed.global_batch, replayed.replicas
        return ScriptMeasured(times, calls, self.source or "", sorted(self.hooked), self.seen, notes, global_batch,
                              replicas, replayed is not None, replayed.replay_steps if replayed else [],
                              self.peer_waits[:len(intervals)], self.input_kind, _mixed_precision(),
                              self.lines_run.recorded() if self.lines_run is not None else {}, list(self.looped),
                              self.warmed, self.first_epoch, list(self.between_epochs),
                              self.new_iterator_each_epoch, turns)

    def _input_in_turns(self, notes: list[str]) -> InputTurns | None:
        """Fit's input measured in turns on a copy of its dataset (input_turns.py), or a note why not."""
        import tensorflow as tf

        from tfdoctor.profile.script.input_turns import measure_in_turns

        assert self.replay is not None
        try:
            turns = measure_in_turns(self.replay, self.input_source, self.progress)
        except (tf.errors.OpError, ValueError, TypeError) as error:  # a copy of the pipeline that cannot run
            turns = f"the step failed on it ({type(error).__name__}: {error})"[:300]
        if isinstance(turns, str):
            notes.append(f"input was not measured in turns on a copy of the script's pipeline: {turns}")
            return None
        return turns

    def _start_trace(self) -> None:
        import tensorflow as tf

        Path(self.trace_dir).mkdir(parents=True, exist_ok=True)
        tf.profiler.experimental.start(self.trace_dir)
        self._traced = 0
        self._mark_trace_step()

    def _mark_trace_step(self) -> None:
        """xprof's steps: from the end of one step call to the end of the next (input fetch, then the call)."""
        import tensorflow as tf

        if self._step_mark is not None:
            self._step_mark.__exit__(None, None, None)
            self._step_mark = None
        if 0 <= self._traced < self.trace_steps:
            self._step_mark = tf.profiler.experimental.Trace("train", step_num=self._traced, _r=1)
            self._step_mark.__enter__()

    def _stop_trace(self) -> dict[str, Any]:
        import tensorflow as tf

        from tfdoctor.profile.trace import summarise

        self._traced = self.trace_steps
        self._mark_trace_step()
        tf.profiler.experimental.stop()
        self._traced = -1
        runs = sorted(Path(self.trace_dir).glob("plugins/profile/*/*.xplane.pb"), key=lambda p: p.stat().st_mtime)
        return {"logdir": self.trace_dir, "xprof": summarise([str(runs[-1])]) if runs else None}


def _mixed_precision() -> str:
    """The Keras global dtype policy when it is a mixed one, of Keras 2 (`tf_keras`) or 3, whichever the script
    imported; '' otherwise."""
    for name in ("tf_keras", "keras"):
        module = sys.modules.get(name)
        try:
            policy = module.mixed_precision.global_policy().name if module is not None else ""
        except AttributeError:  # a Keras without mixed precision
            continue
        if policy.startswith("mixed"):
            return policy
    return ""

