"""The typed protocol between the profiler's parent process and its children (the reference worker, script
mode's launcher, one per host when several workers run): the worker configurations, the events and the
phase results, each a dataclass, and their encoding as one JSON object per line.

Children write events on a file descriptor of their own (its number in `TFDOCTOR_EVENT_FD`), never on
stdout, so a script's prints or TensorFlow's logs cannot split or fake an event. `decode` checks every
field's type: a line that is not an event raises ProtocolError, which the parent reports as one line.
No TensorFlow here.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import threading
import typing
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar, Union

EVENT_FD_ENV = "TFDOCTOR_EVENT_FD"
Record = TypeVar("Record")


class ProtocolError(ValueError):
    """A line on the event channel that is not a well-formed event."""


# -- configurations (parent -> child, on the command line) ----------------------------------------------------

@dataclass(frozen=True)
class WorkerConfig:
    """What one reference-mode worker measures: `replicas` devices, `steps` rounds after `warmup`."""

    replicas: int = 2
    steps: int = 20
    warmup: int = 2
    workload: str = "reference"          # or `package.module:function` returning StepFunctions
    variant: str = "tuned"
    model: str = "yolov3-tiny"
    img_size: int = 128
    batch_per_replica: int = 4
    width: float | None = None           # None: the workload's default for the device
    trace_dir: str | None = None
    trace_steps: int = 3
    only_full: bool = False              # phase A alone (the out-of-memory search)
    fewer_replicas: list[int] = field(default_factory=list)  # phase D: also on these replica counts
    fewer_replicas_steps: int = 10
    params: dict[str, Any] = field(default_factory=dict)     # extra workload parameters (tests' injections)
    multi_worker: bool = False           # one task of a MultiWorkerMirroredStrategy job (TF_CONFIG is set)
    what_if: list[str] = field(default_factory=list)  # changes to try after the phases (what_if.CHANGES)

    def workload_params(self) -> dict[str, Any]:
        """What the workload's `build(strategy, params)` reads."""
        return {"variant": self.variant, "model": self.model, "img_size": self.img_size,
                "batch_per_replica": self.batch_per_replica, "width": self.width, **self.params}


@dataclass(frozen=True)
class ScriptConfig:
    """What script mode's launcher measures in the user's script."""

    replicas: int = 2
    steps: int = 10
    warmup: int = 2
    max_seconds: float = 600.0
    trace_dir: str | None = None
    trace_steps: int = 3
    multi_worker: bool = False           # a task of a multi-worker job: the script makes its own strategy
    what_if: list[str] = field(default_factory=list)  # changes to try on the captured step (what_if.CHANGES)


# -- events (child -> parent) ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Event:
    NAME: ClassVar[str] = ""


@dataclass(frozen=True)
class Devices(Event):
    NAME: ClassVar[str] = "devices"
    kind: str                             # gpu | virtual-gpu | cpu
    names: list[str]
    collective: str | None = None         # a multi-worker job's all-reduce: RING or NCCL
    replicas: int = 0                     # replicas in the whole job (0: len(names))


@dataclass(frozen=True)
class WorkloadReady(Event):
    NAME: ClassVar[str] = "workload"
    name: str
    global_batch: int
    per_replica_batch: int
    notes: list[str]
    causes: list[list[Any]]              # known (rule, path, line) causes


@dataclass(frozen=True)
class Progress(Event):
    NAME: ClassVar[str] = "progress"
    phase: str
    done: int
    total: int


@dataclass(frozen=True)
class PhaseTimes:
    """Seconds of each timed call, phase by phase (phases.py says what each phase runs)."""

    full: list[float]                            # A: seconds per step, real input
    input_wait: list[float]                      # A: seconds per step spent in next(batches)
    on_device: list[float] = field(default_factory=list)  # B
    looped: list[float] = field(default_factory=list)     # H: seconds per step of each call
    gradients: list[float] = field(default_factory=list)  # G
    reduced: list[float] = field(default_factory=list)    # R
    stored: list[float] = field(default_factory=list)     # S (only where the replicas share the host's cores)
    settle: int = 1  # untimed A steps before each round's timed one (phases.settle_steps)


@dataclass(frozen=True)
class FewerReplicas:
    """Phase D: full steps of the same workload on fewer replicas."""

    replicas: int
    global_batch: int
    full: list[float]


@dataclass(frozen=True)
class ClockCheck:
    """The step timed as the phases time it (every output waited for) against an independent clock:
    `synced` waits for every device to finish all its work (`tf.test.experimental.sync_devices`), and
    `trace_ms` is the trace's own step time; None where that clock does not exist."""

    steps: int
    waited: float                  # median seconds per step, waiting for every output
    synced: float | None = None    # the same steps, then every device synchronised
    clock: str | None = None       # which independent clock `synced` is
    trace_ms: float | None = None  # xprof's average step time over the traced steps

    def with_trace(self, trace: dict[str, Any] | None) -> ClockCheck:
        """This check with the trace's own average step time, when xprof found the steps."""
        step_ms = ((trace or {}).get("xprof") or {}).get("step_ms")
        return dataclasses.replace(self, trace_ms=step_ms) if step_ms else self


@dataclass(frozen=True)
class Measured(Event):
    """Reference mode's result (its trace follows in a Traced event)."""

    NAME: ClassVar[str] = "result"
    times: PhaseTimes
    elapsed_s: float
    fewer_replicas: list[FewerReplicas] = field(default_factory=list)
    clock: ClockCheck | None = None


@dataclass(frozen=True)
class EpochBoundary:
    """The time `Model.fit` spent between two epochs: `end_s` from the epoch's last step to its end (the end
    of the data, validation, the callbacks before tfdoctor's), `start_s` from there to the next epoch's first
    step (a new iterator over its data, the next epoch's callbacks)."""

    end_s: float
    start_s: float


@dataclass(frozen=True)
class InputTurns:
    """Input inside the step calls measured in turns: rounds of `block` steps on batches of a copy of the
    script's own pipeline (`fed`, seconds per step) and on the captured batch (`captured`), the i-th of each
    timed in the same round."""

    fed: list[float]
    captured: list[float]
    block: int


@dataclass(frozen=True)
class ScriptMeasured(Event):
    """Script mode's (and the API's) result: the step window and the replays on a captured batch. `full`
    and `on_device` are the same steps (paired); `gradients[i]` and `reduced[i]` come from the same turn."""

    NAME: ClassVar[str] = "script-result"
    times: PhaseTimes
    step_calls: list[float]
    source: str
    hooked: list[str]
    steps_seen: int
    notes: list[str]
    global_batch: int = 0
    replicas: int = 0
    replayed: bool = True                  # False: nothing could be replayed, host and sync not separated
    replay_steps: list[float] = field(default_factory=list)  # B itself: the replayed step, per window step
    peer_waits: list[float] = field(default_factory=list)  # per interval: in input calls, waiting for other workers
    input_kind: str = ""                   # where the step's batches came from ("tf.data", "a Keras Sequence", ...)
    precision: str = ""                    # the Keras global dtype policy when it is a mixed one
    lines_run: dict[str, list[int]] = field(default_factory=dict)  # script's files -> lines run before the window
    looped: list[str] = field(default_factory=list)  # step functions that run many steps per call, input inside
    warmup_steps: int = 0                  # the steps before the window (fit's whole first epoch, or --warmup)
    epoch_steps: int = 0                   # the steps of fit's first epoch, when it ended in the warm-up
    between_epochs: list[EpochBoundary] = field(default_factory=list)  # fit's epoch boundaries seen
    new_iterator_each_epoch: bool = False  # fit's data is a dataset that ends each epoch (no steps_per_epoch)
    input_turns: InputTurns | None = None   # fit's input, measured again in turns against the captured batch


@dataclass(frozen=True)
class WhatIf(Event):
    """One change tried after the phases: `today[i]` and `changed[i]` are seconds per call timed in the same
    round, for `today_examples` and `changed_examples` examples per call. Not applied: `why_not` says why
    (an out-of-memory result is `out_of_memory`, with the error in `why_not`)."""

    NAME: ClassVar[str] = "what-if"
    change: str
    applied: bool
    today: list[float] = field(default_factory=list)
    changed: list[float] = field(default_factory=list)
    today_examples: int = 0
    changed_examples: int = 0
    calls_per_step: int = 1                # steps per changed call (steps-per-call runs K in one)
    why_not: str | None = None
    note: str = ""
    out_of_memory: bool = False
    step_only: bool = False                # timed on the step alone (script mode's replays), not with its input


@dataclass(frozen=True)
class Traced(Event):
    """The trace of a few more steps, sent after the result: TensorFlow's profiler can crash the process
    while it collects a multi-worker trace (a heap corruption in its host tracer), and the result must not go
    with it. `trace` holds the log folder and xprof's summary."""

    NAME: ClassVar[str] = "trace"
    trace: dict[str, Any]


@dataclass(frozen=True)
class NoStep(Event):
    """Script mode: the script ended (or the deadline passed) before the window was complete."""

    NAME: ClassVar[str] = "nostep"
    steps_seen: int
    hooked: list[str]
    ended: str | None = None


@dataclass(frozen=True)
class Crash(Event):
    """Script mode: the user's script raised or exited non-zero."""

    NAME: ClassVar[str] = "crash"
    code: int
    message: str


@dataclass(frozen=True)
class OutOfMemory(Event):
    NAME: ClassVar[str] = "oom"
    message: str


@dataclass(frozen=True)
class Failed(Event):
    """The child's own failure, as one line."""

    NAME: ClassVar[str] = "error"
    message: str


EVENTS: dict[str, type[Event]] = {cls.NAME: cls for cls in (Devices, WorkloadReady, Progress, Measured,
                                                             ScriptMeasured, WhatIf, Traced, NoStep, Crash,
                                                             OutOfMemory, Failed)}


# -- encoding ---------------------------------------------------------------------------------------------------

def encode(value: Event | WorkerConfig | ScriptConfig) -> str:
    """One line of JSON; an event carries its name under "event"."""
    data = dataclasses.asdict(value)
    if isinstance(value, Event):
        data = {"event": value.NAME, **data}
    return json.dumps(data, separators=(",", ":"))


def decode(line: str | bytes) -> Event:
    """The event on one line; ProtocolError when it is not one."""
    try:
        data = json.loads(line)
    except (ValueError, UnicodeDecodeError) as error:
        raise ProtocolError(f"not JSON: {_excerpt(line)}") from error
    if not isinstance(data, dict) or data.get("event") not in EVENTS:
        raise ProtocolError(f"not an event: {_excerpt(line)}")
    cls = EVENTS[data.pop("event")]
    return _build(cls, data, cls.NAME)


def decode_config(text: str, cls: type[Record]) -> Record:
    """A configuration (or any record of this module's types, e.g. a multi-worker part) from its JSON text;
    ProtocolError when it does not fit `cls`."""
    try:
        data = json.loads(text)
    except ValueError as error:
        raise ProtocolError(f"configuration is not JSON: {_excerpt(text)}") from error
    return _build(cls, data, cls.__name__)


def _excerpt(line: str | bytes) -> str:
    text = line.decode("utf-8", "replace") if isinstance(line, bytes) else line
    text = text.strip()
    return repr(text[:80] + ("..." if len(text) > 80 else ""))


def _build(cls: type, data: Any, where: str) -> Any:
    if not isinstance(data, dict):
        raise ProtocolError(f"{where}: expected an object, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = set(data) - set(fields)
    if unknown:
        raise ProtocolError(f"{where}: unknown field {sorted(unknown)[0]!r}")
    values = {}
    for name, spec in fields.items():
        if name not in data:
            if spec.default is dataclasses.MISSING and spec.default_factory is dataclasses.MISSING:
                raise ProtocolError(f"{where}: missing field {name!r}")
            continue
        values[name] = _convert(hints[name], data[name], f"{where}.{name}")
    return cls(**values)


def _convert(kind: Any, value: Any, where: str) -> Any:
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin is Union or type(kind).__name__ == "UnionType":
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _convert(inner[0], value, where)
    if kind is Any:
        return value
    if dataclasses.is_dataclass(kind):
        return _build(kind, value, where)
    if origin is list:
        if not isinstance(value, list):
            raise ProtocolError(f"{where}: expected a list, got {type(value).__name__}")
        return [_convert(args[0], item, where) for item in value] if args else value
    if origin is dict:
        if not isinstance(value, dict):
            raise ProtocolError(f"{where}: expected an object, got {type(value).__name__}")
        return {key: _convert(args[1], item, f"{where}[{key!r}]") for key, item in value.items()} if args else value
    if kind is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if kind in (int, str, bool) and isinstance(value, kind) and (kind is bool or not isinstance(value, bool)):
        return value
    raise ProtocolError(f"{where}: expected {getattr(kind, '__name__', kind)}, got {type(value).__name__}")


# -- the child's side of the channel -----------------------------------------------------------------------------

class Channel:
    """Where a child writes its events: the descriptor named in TFDOCTOR_EVENT_FD (stdout when run by hand).
    Safe to use from several threads (script mode's watchdog writes too)."""

    def __init__(self) -> None:
        fd = os.environ.get(EVENT_FD_ENV)
        self._fd = int(fd) if fd and fd.isdigit() else None
        if self._fd is not None:
            os.set_inheritable(self._fd, False)  # the script's own subprocesses do not get it
        self._lock = threading.Lock()

    def emit(self, event: Event) -> None:
        data = (encode(event) + "\n").encode()
        with self._lock:
            if self._fd is None:
                sys.__stdout__.write(data.decode())
                sys.__stdout__.flush()
                return
            view = memoryview(data)
            while view:
                view = view[os.write(self._fd, view):]

    def progress(self, phase: str, done: int, total: int) -> None:
        self.emit(Progress(phase, done, total))
