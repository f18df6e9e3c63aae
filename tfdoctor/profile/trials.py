"""The measured what-if of a reference (or --workload) run: each change applied to the workload and timed in
rounds beside today's full step, in the measuring child (PROFILER.md, "Measured what-if").

Today is the full step on the real input (`next(batches)` then the step), as phase A times it. Each round
times today and the changed step in turns whose order alternates, so the machine's drift touches both: one call
each when the change shares today's input, a block of consecutive steps each when it has batches of its own (a
pipeline, or the batch on the devices), since a pipeline buffers while the other side runs (`Side`).
`what_if.judge` makes the ratio. Tracing, compiling and filling a pipeline's buffers happen in untimed calls
first. A multi-worker task runs the same calls in the same order as every other worker (each call holds a
collective), so a change is applied everywhere or nowhere: whether it applies depends only on the
configuration, never on one worker's state."""

from __future__ import annotations

import itertools
import re
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import tensorflow as tf

from tfdoctor.profile.phases import PIPELINE_WARMUP, SETTLE, SETTLE_MAX, STEADY_TAIL, Progress, lags, timed, wait
from tfdoctor.profile.protocol import PhaseTimes, WhatIf, WorkerConfig
from tfdoctor.profile.workload import StepFunctions

Build = Callable[[tf.distribute.Strategy, dict[str, Any]], StepFunctions]
TRIAL_SECONDS = 12.0  # timed rounds of a change stop once they have taken this long (at least MIN_ROUNDS; one host)
MIN_ROUNDS = 6
BLOCK = 5  # consecutive timed steps a side in a round, for a change with an input pipeline of its own
DRAIN = 64  # untimed steps before them at most, for a pipeline that lags (`Side`; they stop at its first wait)
DRAIN_JOB = 2 * SETTLE_MAX  # on a job's workers, which run them all
MIN_BLOCK_ROUNDS = 6  # with 4, a sync-bound script's unchanged input pipeline once measured 1.14x (1.07-1.83)
UNTIMED = 2  # untimed calls of each side before the rounds (tracing, XLA compilation)
LOOPED = 4  # steps per call for steps-per-call
WAITED_S, WAITED_SHARE = 0.001, 0.05  # a step waited for its input when its next() took more than 1 ms and 5% of
# the quickest step (and half the longest wait: `first_steady`)
BYTES_PER_PACK = 32 * 1024 * 1024  # the pack size tried for MultiWorkerMirroredStrategy's all-reduce
CPU_MIXED = ("no GPU: float16 has no fast path on CPUs (they emulate it, slower), so mixed precision is not a "
             "CPU change; run on a GPU to measure it")
TRACEBACK_LINES = ("Detected at node", "File ", "<stack traces", "[[")  # where TensorFlow says where, not what


def error_line(error: BaseException) -> str:
    """What went wrong, in one short line: the op XLA cannot compile, else the first line that says something."""
    text = str(getattr(error, "message", "") or error)
    unsupported = re.search(r"unsupported operations .*? on XLA_\w+: (\w+)", text)
    if unsupported:
        return f"XLA cannot compile the op {unsupported.group(1)}"
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.strip().endswith("error:")
             and not line.strip().startswith(TRACEBACK_LINES)]
    return lines[0][:200] if lines else type(error).__name__


def first_steady(waits: list[float], totals: list[float]) -> int:
    """The first of a block's consecutive steps that ran at its pipeline's pace, from each step's wait in `next()`
    and its whole time: the one after the first step that waited (for a batch already part made), where a wait
    is at least half the block's longest and longer than WAITED_S and WAITED_SHARE of its quickest step (a
    distributed iterator's own `next()` takes about 1 ms); the steps before took batches buffered while the
    other side ran. 0 when none waited (the pipeline kept up); the last step when only it did."""
    threshold = max(WAITED_S + WAITED_SHARE * min(totals), max(waits) / 2)
    return next((min(index + 1, len(waits) - 1) for index, seconds in enumerate(waits) if seconds > threshold), 0)


def _one_step(step: Callable[[Any], Any], batches: Iterator[Any]) -> tuple[float, float]:
    """Seconds in `next(batches)`, and in the whole step."""
    start = time.perf_counter()
    batch = next(batches)
    got = time.perf_counter()
    wait(step(batch))
    return got - start, time.perf_counter() - start


@dataclass(frozen=True)
class Side:
    """One side of a what-if timed in blocks of consecutive steps: its step on its own batches, and how many
    untimed steps at most first take what its pipeline buffered while the other side ran (0 for a pipeline that
    keeps up), until one waits in `next()` half its `backlog` (its wait at the pace of steps in a row)."""

    step: Callable[[Any], Any]
    batches: Iterator[Any]
    drain: int = 0
    backlog: float = 0.0

    @classmethod
    def warmed(cls, step: Callable[[Any], Any], batches: Iterator[Any], drain: int,
               agree: Callable[[int], int] = int) -> Side:
        """The side after PIPELINE_WARMUP untimed steps (they fill its buffers, tune its parallelism, trace its
        step), which drains up to `drain` steps where their last STEADY_TAIL show it lags (`phases.lags`; on any
        of a job's workers: `agree` gives the largest)."""
        waits, steps = zip(*[_one_step(step, batches) for _ in range(PIPELINE_WARMUP)][-STEADY_TAIL:])
        return cls(step, batches, drain if agree(int(lags(list(waits), list(steps)))) else 0, statistics.median(waits))

    def steady(self, count: int, may_stop: bool) -> float:
        """Seconds per step over `count` consecutive steps at the pipeline's pace, after the drain (all of it
        without `may_stop`: a worker of a job runs as many steps as every other worker), from the first that
        ran at that pace (`first_steady`)."""
        for _ in range(self.drain):
            if _one_step(self.step, self.batches)[0] >= self.backlog / 2 and may_stop:
                break
        waits, totals = zip(*(_one_step(self.step, self.batches) for _ in range(count)))
        first = first_steady(list(waits), list(totals))
        return sum(totals[first:]) / len(totals[first:])


def in_turns(label: str, today: Callable[[], float], changed: Callable[[], float], rounds: int, least: int,
             progress: Progress, may_stop: bool) -> tuple[list[float], list[float]]:
    """Seconds of `today()` and `changed()` in `rounds` rounds, in an order that alternates from round to round;
    with `may_stop`, the rounds end once TRIAL_SECONDS have passed and `least` rounds are done (never on a
    worker of a job, where every worker must make the same calls)."""
    today_times: list[float] = []
    changed_times: list[float] = []
    started = time.perf_counter()
    for index in range(rounds):
        sides = [(today_times, today), (changed_times, changed)]
        for times, call in sides if index % 2 == 0 else reversed(sides):
            times.append(call())
        progress(label, index + 1, rounds)
        if may_stop and index + 1 >= least and time.perf_counter() - started > TRIAL_SECONDS:
            break
    return today_times, changed_times


class Trials:
    """Runs the requested changes on one workload and yields their `WhatIf` results."""

    def __init__(self, work: StepFunctions, batches: Iterator[Any], build: Build, strategy: tf.distribute.Strategy,
                 config: WorkerConfig, device_kind: str, progress: Progress, keep: Callable[[Any], Any],
                 times: PhaseTimes, agree: Callable[[int], int] | None = None) -> None:
        """`times`: phase A's, which say whether today's pipeline buffers batches it cannot keep up with (its
        `settle`) and its wait in `next()` at the pace of steps in a row; `agree`: the largest of a count over a
        job's workers."""
        self.work, self.batches, self.build, self.strategy = work, batches, build, strategy
        self.config, self.kind, self.progress, self.keep = config, device_kind, progress, keep
        self.rounds = max(config.steps, MIN_ROUNDS)
        self.agree = agree or int
        self.drain = DRAIN_JOB if config.multi_worker else DRAIN
        self.today = Side(work.step, batches, self.drain if times.settle > SETTLE else 0,
                          statistics.median(times.input_wait))

    def run(self, changes: list[str]) -> Iterator[WhatIf]:
        trials = {"input-on-device": self._input_on_device, "tf-data-tuned": self._tuned_input,
                  "batch-x2": self._batch_x2, "xla": self._xla, "mixed-precision": self._mixed_precision,
                  "all-reduce": self._all_reduce, "steps-per-call": self._steps_per_call}
        for change in changes:
            yield from trials[change]()

    # -- timing -----------------------------------------------------------------------------------------------

    def _today(self) -> float:
        return timed(lambda: self.work.step(next(self.batches)))

    def _paired(self, change: str, changed: Callable[[], float], examples: int, calls_per_step: int = 1,
                note: str = "") -> WhatIf:
        """Today and `changed`, one call each per round, after untimed calls of each. For changes that share
        today's input pipeline: whatever it buffers serves both sides (a change without input is timed in
        `_blocks`)."""
        for _ in range(UNTIMED):
            changed()
            self._today()
        today, tried = in_turns(f"what-if {change}", self._today, changed, self.rounds, MIN_ROUNDS, self.progress,
                                not self.config.multi_worker)
        return WhatIf(change, True, today, tried, self.work.global_batch, examples, calls_per_step, note=note)

    def _blocks(self, change: str, other: StepFunctions, batches: Iterator[Any], note: str) -> WhatIf:
        """Today and a step on batches of its own (an input pipeline, or the batch already on the devices), in
        blocks of consecutive steps that take turns: a prefetching pipeline fills its buffers while the
        other side runs, so single calls would time its buffer, not its pace (`Side` takes it first,
        untimed)."""
        changed = Side.warmed(other.step, batches, self.drain, self.agree)
        may_stop = not self.config.multi_worker
        today, tried = in_turns(f"what-if {change}", lambda: self.today.steady(BLOCK, may_stop),
                                lambda: changed.steady(BLOCK, may_stop), max(MIN_BLOCK_ROUNDS, self.rounds // BLOCK),
                                MIN_BLOCK_ROUNDS, self.progress, may_stop)
        return WhatIf(change, True, today, tried, self.work.global_batch, other.global_batch, note=note)

    def _rebuilt(self, change: str, strategy: tf.distribute.Strategy, note: str, **params: Any) -> WhatIf:
        """The same workload built again with other parameters (or under another strategy), timed on its own
        input; out of memory is a result."""
        try:
            other = self.build(strategy, {**self.config.workload_params(), **params})
            return self._blocks(change, other, self.keep(other.batches()), note)
        except tf.errors.ResourceExhaustedError as error:
            return WhatIf(change, False, why_not=f"out of memory ({error_line(error)})", note=note, out_of_memory=True)

    # -- the changes ----------------------------------------------------------------------------------------

    def _input_on_device(self) -> Iterator[WhatIf]:
        yield self._blocks("input-on-device", self.work, itertools.repeat(self.work.device_batch),
                           "the same step on a batch already on the devices: no input work at all")

    def _tuned_input(self) -> Iterator[WhatIf]:
        if self.work.tuned_batches is None:
            yield WhatIf("tf-data-tuned", False, why_not=self.work.tuned_missing or "the workload offers no "
                         "tuned input pipeline")
            return
        yield self._blocks("tf-data-tuned", self.work, self.keep(self.work.tuned_batches()), self.work.tuned_note)

    def _batch_x2(self) -> Iterator[WhatIf]:
        doubled = self.work.per_replica_batch * 2
        yield self._rebuilt("batch-x2", self.strategy, f"{doubled} examples per replica instead of "
                            f"{self.work.per_replica_batch}: a larger batch changes the optimisation, so scale the "
                            "learning rate (with a warm-up) to keep convergence", batch_per_replica=doubled)

    def _xla(self) -> Iterator[WhatIf]:
        step = self.work.xla_step
        if step is None:
            yield WhatIf("xla", False, why_not="the workload offers no XLA-compiled step")
            return
        try:
            step(next(self.batches))
        except (tf.errors.InvalidArgumentError, tf.errors.UnimplementedError) as error:
            yield WhatIf("xla", False, why_not=f"the step failed with it ({error_line(error)})")
            return
        yield self._paired("xla", lambda: timed(lambda: step(next(self.batches))), self.work.global_batch,
                           note="forward and backward of each replica compiled with jit_compile=True; the "
                                "all-reduce and the update stay outside the cluster")

    def _mixed_precision(self) -> Iterator[WhatIf]:
        if self.kind == "cpu":
            yield WhatIf("mixed-precision", False, why_not=CPU_MIXED)
        elif self.config.workload != "reference":
            yield WhatIf("mixed-precision", False, why_not="a --workload builds its own model, under its own policy")
        else:
            yield self._rebuilt("mixed-precision", self.strategy, "mixed_float16 policy, LossScaleOptimizer",
                                mixed_precision=True)

    def _all_reduce(self) -> Iterator[WhatIf]:
        if self.config.multi_worker:
            yield from self._communication_options()
            return
        current = type(self.strategy.extended._cross_device_ops).__name__  # noqa: SLF001 - no public accessor
        devices = list(self.strategy.extended.worker_devices)
        options = {"NcclAllReduce": tf.distribute.NcclAllReduce,
                   "HierarchicalCopyAllReduce": tf.distribute.HierarchicalCopyAllReduce,
                   "ReductionToOneDevice": tf.distribute.ReductionToOneDevice}
        if self.kind != "gpu":
            options.pop("NcclAllReduce")  # NCCL needs physical GPUs (TFD111)
        for name, make in options.items():
            if name == current:
                continue
            strategy = tf.distribute.MirroredStrategy(devices, cross_device_ops=make())
            yield self._rebuilt(f"all-reduce: {name}", strategy, f"MirroredStrategy(cross_device_ops={name}()) "
                                f"instead of {current}")

    def _communication_options(self) -> Iterator[WhatIf]:
        """MultiWorkerMirroredStrategy: the step traced again with other CommunicationOptions (a process can
        make only one such strategy, so its all-reduce calls are given the options instead)."""
        from tfdoctor.profile.collective_options import communication_options

        python_step = getattr(self.work.step, "python_function", None)
        if python_step is None:
            yield WhatIf("all-reduce", False, why_not="the step is not a tf.function, so it cannot be traced "
                         "again with other communication options")
            return
        implementation = tf.distribute.experimental.CommunicationImplementation
        variants = {"bytes_per_pack=32MiB": tf.distribute.experimental.CommunicationOptions(
            bytes_per_pack=BYTES_PER_PACK)}
        if self.kind == "gpu":
            variants["RING"] = tf.distribute.experimental.CommunicationOptions(implementation=implementation.RING)
        for name, options in variants.items():
            traced = tf.function(python_step)
            with communication_options(options):
                timed(lambda: traced(next(self.batches)))  # traced here, with the options
            yield self._paired(f"all-reduce: {name}", lambda: timed(lambda: traced(next(self.batches))),
                               self.work.global_batch, note=f"CommunicationOptions({name}) on every all-reduce "
                               "of the step")

    def _steps_per_call(self) -> Iterator[WhatIf]:
        looped = self.work.looped_steps
        if looped is None:
            from_python = not isinstance(self.batches, (tf.data.Iterator, tf.distribute.DistributedIterator))
            yield WhatIf("steps-per-call", False, why_not="the batches come from Python, so several steps cannot "
                         "run inside one graph call; feed them from tf.data first (TFD201)" if from_python else
                         "the workload offers no call that runs several steps")
            return
        count = tf.constant(LOOPED)
        yield self._paired("steps-per-call", lambda: timed(lambda: looped(self.batches, count)),
                           self.work.global_batch * LOOPED, calls_per_step=LOOPED,
                           note=f"{LOOPED} steps inside one tf.function call, each on the next batch")
