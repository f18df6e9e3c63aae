"""Run a profiler worker in a child process, follow its progress, and turn every failure into one line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import deque
from typing import Any, Callable

from tfdoctor.profile.worker import EVENT_PREFIX

OnEvent = Callable[[dict[str, Any]], None]


class ProfileError(Exception):
    """A run that could not be measured: the message is one line for the user."""


class OutOfMemory(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def run_worker(config: dict[str, Any], on_event: OnEvent, timeout_s: float, command: list[str] | None = None,
               env: dict[str, str] | None = None) -> dict[str, Any]:
    """The worker's events until its result; raises OutOfMemory or ProfileError. `command` runs another
    child that prints the same events (script mode's launcher); `env` adds to the environment."""
    command = command or [sys.executable, "-m", "tfdoctor.profile.worker", json.dumps(config)]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2"),
           "PYTHONUNBUFFERED": "1", **(env or {})}
    events: dict[str, dict[str, Any]] = {}
    tail: deque[str] = deque(maxlen=20)
    try:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                                   start_new_session=True)
    except OSError as error:
        raise ProfileError(f"cannot start the profiler worker: {error}") from None
    try:
        assert process.stdout is not None
        for line in process.stdout:
            if line.startswith(EVENT_PREFIX):
                event = json.loads(line[len(EVENT_PREFIX):])
                events[event["event"]] = event
                on_event(event)
            elif line.strip():
                tail.append(line.rstrip())
        code = process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        raise ProfileError(f"the measurement did not finish within {timeout_s:.0f} s") from None
    except KeyboardInterrupt:
        os.killpg(process.pid, signal.SIGKILL)
        raise
    if "oom" in events:
        raise OutOfMemory(events["oom"]["message"])
    if "result" in events and code == 0:
        return {**events.get("devices", {}), **events.get("workload", {}), **events["result"]}
    if code in (-signal.SIGKILL, 137):
        raise OutOfMemory("the measuring process was killed (the system ran out of memory)")
    if "error" in events:
        raise ProfileError(f"the measurement failed: {events['error']['message']}")
    last = next((line for line in reversed(tail) if line.strip()), "no output")
    raise ProfileError(f"the measurement failed with exit code {code}: {last[:300]}")
