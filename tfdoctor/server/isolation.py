"""Engine calls in one long-lived child process, so that whatever an editor's buffer holds, the server lives.

libcst's native parser can crash the process on pathological input (5,000 nested parentheses), and a huge
buffer can take the memory; in the child that costs one call, and the next call starts a fresh child. A
call also has a deadline. A call costs about a millisecond more than in-process (pickling its arguments
and result); the child is started once, when the server starts, with the rules imported.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import sys
from multiprocessing.connection import Connection
from typing import Any, Callable, TypeVar

from tfdoctor.config import ConfigError

Result = TypeVar("Result")


class WorkerLost(Exception):
    """The child process died or ran past its deadline during a call; the message says which."""


class Isolated:
    """Runs one call at a time in the child, restarting it after a crash or a deadline."""

    def __init__(self, deadline_s: float) -> None:
        self.deadline_s = deadline_s
        self._process: multiprocessing.process.BaseProcess | None = None
        self._connection: Connection | None = None
        self._lock = asyncio.Lock()

    def start(self) -> None:
        context = multiprocessing.get_context("spawn")  # never fork a process with threads and an event loop
        ours, theirs = context.Pipe()
        self._process = context.Process(target=_serve, args=(theirs,), daemon=True, name="tfdoctor-engine")
        self._process.start()
        theirs.close()
        self._connection = ours

    def stop(self) -> None:
        if self._process is not None and self._process.is_alive():
            self._process.kill()
            self._process.join(5)
        if self._connection is not None:
            self._connection.close()
        self._process = self._connection = None

    async def run(self, function: Callable[..., Result], *args: Any) -> Result:
        """`function(*args)` in the child. ConfigError comes back as raised there, other exceptions as
        RuntimeError. A caller that is cancelled leaves the call to finish, so no answer is left behind."""
        return await asyncio.shield(self._run(function, args))

    async def _run(self, function: Callable[..., Result], args: tuple[Any, ...]) -> Result:
        async with self._lock:
            if self._process is None or not self._process.is_alive():
                self.stop()
                self.start()
            connection = self._connection
            assert connection is not None
            connection.send((function, args))
            if not await asyncio.to_thread(connection.poll, self.deadline_s):
                self.stop()
                raise WorkerLost(f"took longer than {self.deadline_s:.0f} s")
            try:
                kind, value = connection.recv()
            except (EOFError, OSError):
                code = self._process.exitcode if self._process is not None else None
                self.stop()
                raise WorkerLost(f"the process linting it crashed (exit code {code})") from None
        if kind == "config":
            raise ConfigError(value)
        if kind == "error":
            raise RuntimeError(value)
        return value


def _serve(connection: Connection) -> None:
    """The child: answer calls until the server closes the pipe. Its standard output is the protocol's
    channel, so anything printed goes to standard error."""
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    from tfdoctor.lint.rule import all_rules

    all_rules()  # the rules and libcst, imported before the first call

    while True:
        try:
            function, args = connection.recv()
        except (EOFError, OSError):
            return
        try:
            answer: tuple[str, Any] = ("ok", function(*args))
        except ConfigError as error:
            answer = ("config", str(error))
        except (RecursionError, Exception) as error:  # noqa: BLE001 - said to the server, which goes on
            answer = ("error", f"{type(error).__name__}: {error}")
        connection.send(answer)
