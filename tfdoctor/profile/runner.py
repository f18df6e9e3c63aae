"""Run profiler children (a worker, script mode's launcher, or several at once), read their events on a
channel of their own with a real deadline, and turn every failure into one line.

Each child runs in its own session (process group), with its events on a pipe of their own and its stdout
and stderr on another, whose last lines explain a crash. `follow` reads all the children's pipes with
`selectors` until each has exited or the deadline passes; a child that hangs, or writes a line that is not an
event, has its whole process group killed (all the children's, when one fails).
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any, Callable, TypeVar

from tfdoctor.profile import protocol
from tfdoctor.profile.protocol import Event, WorkerConfig

OnEvent = Callable[[Event], None]
E = TypeVar("E", bound=Event)
TAIL_LINES = 20


class ProfileError(Exception):
    """A run that could not be measured: the message is one line for the user."""


class OutOfMemory(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class Child:
    """One child process: its events (in order of arrival) and the last lines of its output."""

    def __init__(self, command: list[str], env: dict[str, str] | None = None, name: str = "the measurement",
                 log: Path | None = None) -> None:
        self.name = name
        self.events: list[Event] = []
        self.tail: deque[str] = deque(maxlen=TAIL_LINES)
        self.log = log  # every line of the child's output goes there too
        self._log = None
        if log is not None:
            try:
                log.parent.mkdir(parents=True, exist_ok=True)
                self._log = log.open("w", encoding="utf-8")
            except OSError as error:
                raise ProfileError(f"cannot write the output log {log}: {error.strerror or error}") from None
        read_events, write_events = os.pipe()
        environment = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2"),
                       "PYTHONUNBUFFERED": "1", **(env or {}), protocol.EVENT_FD_ENV: str(write_events)}
        try:
            self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                            stderr=subprocess.STDOUT, env=environment, start_new_session=True,
                                            pass_fds=(write_events,))
        except OSError as error:
            os.close(read_events)
            raise ProfileError(f"cannot start {self.name}: {error}") from None
        finally:
            os.close(write_events)
        self._pipes: dict[int, bytearray] = {read_events: bytearray(), self.process.stdout.fileno(): bytearray()}
        self._events_fd = read_events

    def last(self, kind: type[E]) -> E | None:
        return next((e for e in reversed(self.events) if isinstance(e, kind)), None)

    def failure(self) -> str:
        """What went wrong, in one line: the child's own error event, else its exit code and last output."""
        failed = self.last(protocol.Failed)
        if failed:
            return failed.message
        return f"exit code {self.process.returncode}: {self.tail[-1][:300] if self.tail else 'no output'}"

    def kill(self) -> None:
        """The child's whole process group (what it started too)."""
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.process.wait()
        self._close()

    def _close(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None
        for fd in list(self._pipes):
            if fd == self._events_fd:
                os.close(fd)
        self._pipes.clear()
        if self.process.stdout:
            self.process.stdout.close()

    def _take(self, fd: int, data: bytes, on_event: OnEvent) -> None:
        """Whole lines of `data` read from `fd` (b"" at end of file): events, or output for the tail."""
        buffer = self._pipes[fd]
        buffer += data
        lines = buffer.split(b"\n")
        if data:
            self._pipes[fd] = bytearray(lines.pop())
        else:
            self._pipes[fd] = bytearray()
        for line in lines:
            if fd != self._events_fd:
                text = line.decode("utf-8", "replace").rstrip()
                if self._log is not None:
                    self._log.write(text + "\n")
                if text.strip():
                    self.tail.append(text)
            elif line.strip():
                event = protocol.decode(bytes(line))
                self.events.append(event)
                on_event(event)


def follow(children: list[Child], deadline: float, on_event: Callable[[Child, Event], None],
           fail_fast: bool = False) -> None:
    """Read the children's events and output until each has exited; at `deadline` (a `time.monotonic()`
    time) or at a malformed event every child's process group is killed and ProfileError says why.
    `fail_fast`: the same as soon as one child exits with a non-zero code (the others of a multi-worker job
    would wait for it forever)."""
    selector = selectors.DefaultSelector()
    for child in children:
        for fd in child._pipes:
            os.set_blocking(fd, False)
            selector.register(fd, selectors.EVENT_READ, child)
    try:
        while selector.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                running = [child for child in children if child.process.poll() is None] or children
                raise ProfileError(f"{', '.join(child.name for child in running)} did not finish within its time "
                                   f"limit ({_hung(running)})")
            for key, _ in selector.select(timeout=min(left, 0.5)):
                child: Child = key.data
                data = _read(key.fd)
                if data is None:
                    continue
                try:
                    child._take(key.fd, data, lambda event, c=child: on_event(c, event))
                except protocol.ProtocolError as error:
                    raise ProfileError(f"{child.name} sent a malformed event ({error})") from None
                if not data:
                    selector.unregister(key.fd)
            for child in children:  # an exited child whose pipes a grandchild keeps open is done too
                if child.process.poll() is not None and any(k.data is child for k in selector.get_map().values()):
                    _drain(selector, child, on_event)
                if fail_fast and child.process.returncode:
                    raise ProfileError(f"{child.name} failed: {child.failure()}")
        for child in children:
            left = max(deadline - time.monotonic(), 0.1)
            try:
                child.process.wait(timeout=left)
            except subprocess.TimeoutExpired:
                raise ProfileError(f"{child.name} did not exit within its time limit") from None
    except BaseException:
        for child in children:
            child.kill()
        raise
    finally:
        selector.close()
    for child in children:
        child.kill()  # whatever the child left running in its group goes too


def _read(fd: int) -> bytes | None:
    """What is there to read (b"" at end of file), None when nothing is after all."""
    try:
        return os.read(fd, 65536)
    except BlockingIOError:
        return None
    except OSError:
        return b""


def _drain(selector: selectors.BaseSelector, child: Child, on_event: Callable[[Child, Event], None]) -> None:
    for key in [k for k in selector.get_map().values() if k.data is child]:
        while True:
            data = _read(key.fd) or b""
            try:
                child._take(key.fd, data, lambda event, c=child: on_event(c, event))
            except protocol.ProtocolError as error:
                raise ProfileError(f"{child.name} sent a malformed event ({error})") from None
            if not data:
                break
        selector.unregister(key.fd)


def _hung(children: list[Child]) -> str:
    progress = [c.last(protocol.Progress) for c in children]
    seen = [f"{p.phase} {p.done}/{p.total}" for p in progress if p]
    return f"last progress: {seen[-1]}" if seen else "no progress reported"


def run_child(command: list[str], on_event: OnEvent, timeout_s: float, env: dict[str, str] | None = None,
              name: str = "the measurement", log: Path | None = None) -> Child:
    """Run one child to its end within `timeout_s`, its output also written to `log`; raises ProfileError
    (hang, garbage, failed start)."""
    child = Child(command, env, name, log)
    follow([child], time.monotonic() + timeout_s, lambda _, event: on_event(event))
    return child


def run_worker(config: WorkerConfig, on_event: OnEvent, timeout_s: float) -> Child:
    """A reference-mode worker to its result; raises OutOfMemory or ProfileError."""
    child = run_child([sys.executable, "-m", "tfdoctor.profile.worker", protocol.encode(config)], on_event,
                      timeout_s)
    raise_failure(child, protocol.Measured)
    return child


def raise_failure(child: Child, result: type[Event]) -> None:
    """OutOfMemory or ProfileError unless `child` sent a `result` event. How it ended after that does not
    matter: all that follows a result is its trace (`trace_of`)."""
    if child.last(result) is not None:
        return
    code = child.process.returncode
    oom = child.last(protocol.OutOfMemory)
    if oom:
        raise OutOfMemory(oom.message)
    if code in (-signal.SIGKILL, 137):
        raise OutOfMemory("the measuring process was killed (the system ran out of memory)")
    failed = child.last(protocol.Failed)
    if failed:
        raise ProfileError(f"the measurement failed: {failed.message}")
    raise ProfileError(f"the measurement {_ending(code)}: {child.tail[-1][:300] if child.tail else 'no output'}")


def trace_of(child: Child, requested: bool) -> tuple[dict[str, Any] | None, str | None]:
    """The trace `child` sent after its result and, where one was asked for and none came, a note saying why."""
    traced = child.last(protocol.Traced)
    if traced is not None or not requested:
        return (traced.trace if traced else None), None
    error = child.last(protocol.Failed) or child.last(protocol.Crash)
    why = ("ran out of memory" if child.last(protocol.OutOfMemory) else f"failed ({error.message})" if error
           else _ending(child.process.returncode))
    return None, f"the trace is missing: the process {why} before it was written"


def _ending(code: int | None) -> str:
    """How a process ended, in words: "was killed by SIGABRT", "exited with code 3"."""
    if code is not None and code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"
