"""The child process of script mode: set up the replica devices, install the hooks, run the user's script
as `__main__` with its own arguments, and send the measurements as protocol events on the event channel
(not stdout, which stays the script's own).

    python -m tfdoctor.profile.script.launch '{"replicas": 2, "steps": 10, ...}' train.py ARGS
    python -m tfdoctor.profile.script.launch '{"replicas": 2, "steps": 10, ...}' -m pkg.train ARGS

The process ends as soon as the result is out (the rest of the training is not needed); a script that ends
first is measured on the steps it ran.
"""

from __future__ import annotations

import importlib.util
import os
import re
import runpy
import sys
import threading
import time
import traceback
from typing import Any

from tfdoctor.profile import protocol
from tfdoctor.profile.protocol import ScriptConfig

CHANNEL = protocol.Channel()
IDLE_WINDOW_S = 20.0  # the end of the wait for a first step over which the process's CPU use is measured
IDLE_SHARE = 0.05     # less of one core than this is idle (waiting, not computing)


def _finished(result: protocol.ScriptMeasured | protocol.NoStep) -> None:
    """Report and end the process: after the window the script's training is not needed."""
    CHANNEL.emit(result)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0 if isinstance(result, protocol.ScriptMeasured) else 3)


def _watchdog(recorder: Any, seconds: float) -> None:
    """After `seconds`: no step yet is an error (saying whether the process was idle at the end, as a script
    that waits on a lock, a peer or a queue is); a partial window is measured at the next step."""
    look = min(IDLE_WINDOW_S, seconds / 2)
    time.sleep(seconds - look)
    used = time.process_time()
    time.sleep(look)
    if recorder.seen == 0:
        busy = (time.process_time() - used) / look
        idle = f", idle for its last {look:.0f} s ({busy:.0%} of a core)" if busy < IDLE_SHARE else ""
        _finished(protocol.NoStep(0, sorted(recorder.hooked), f"ran {seconds:.0f} s{idle}"))
    recorder.deadline = time.perf_counter()


def _crash(script: str, error: BaseException, code: int) -> None:
    frames = [f for f in traceback.extract_tb(error.__traceback__) if os.path.abspath(f.filename) == script]
    where = f" at {os.path.relpath(script)}:{frames[-1].lineno}" if frames else ""
    text = f"{type(error).__name__}: {_what(error)}"
    CHANNEL.emit(protocol.Crash(code, f"{text[:300]}{where}{_meaning(error)}"[:600]))
    traceback.print_exception(error)
    sys.stderr.flush()
    os._exit(code)


TENSOR_VALUES = re.compile(r"numpy=\s*array\(.*?\)>")  # the values in an eager tensor's repr


def _what(error: BaseException) -> str:
    """The error's message on one line; for a TensorFlow graph error ("Graph execution error:" then the
    node's stack) its last line, where the op's own message is."""
    lines = [line.strip() for line in str(getattr(error, "message", None) or error).strip().splitlines() if line.strip()]
    if lines and lines[0].startswith("Graph execution error") and len(lines) > 1:
        return lines[-1]
    return TENSOR_VALUES.sub("...>", " ".join(lines))


def _meaning(error: BaseException) -> str:
    """What a known failure means for the script (empty for others)."""
    from tfdoctor.profile.script import hooks

    if "PerReplica" in str(error) and hooks.fitting() == "keras" and "TF_CONFIG" in os.environ:  # a worker of a job
        return (" (Keras 3's Model.fit fails under MultiWorkerMirroredStrategy with this TensorFlow (TFD518): train in "
                "a custom loop, or with Keras 2 through tf_keras and TF_USE_LEGACY_KERAS=1)")
    return ""


def _module_file(name: str) -> str:
    """The file `runpy.run_module` will run (a package's `__main__`), for the crash line; imports the parent
    packages, as running the module does anyway."""
    spec = importlib.util.find_spec(name)
    if spec is not None and spec.submodule_search_locations:
        spec = importlib.util.find_spec(f"{name}.__main__")
    return os.path.abspath(spec.origin) if spec is not None and spec.origin else name


def main(argv: list[str]) -> int:
    config = protocol.decode_config(argv[1], ScriptConfig)
    module = argv[3] if argv[2] == "-m" else None
    script, script_args = (module, argv[4:]) if module else (os.path.abspath(argv[2]), argv[3:])
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    from tfdoctor.profile.script import hooks
    from tfdoctor.profile.script.lines_run import LinesRun
    from tfdoctor.profile.script.recorder import Recorder
    from tfdoctor.reference.devices import setup_replicas

    if config.multi_worker:  # the script's MultiWorkerMirroredStrategy sets up the runtime: nothing before it
        kind, names = ("gpu" if tf.config.list_physical_devices("GPU") else "cpu"), None
    else:
        _, kind, names = setup_replicas(config.replicas)
    CHANNEL.emit(protocol.Devices(kind, names or []))
    lines_run = LinesRun(os.getcwd() if module else os.path.dirname(script))
    recorder = Recorder(config.steps, config.warmup, _finished, CHANNEL.progress, config.trace_dir,
                        config.trace_steps, across_workers=config.multi_worker, on_partial=CHANNEL.emit,
                        what_if=config.what_if, device_kind=kind,
                        lines_run=lines_run)
    hooks.install(recorder, names)
    threading.Thread(target=_watchdog, args=(recorder, config.max_seconds), daemon=True).start()
    lines_run.start()
    try:
        if module:  # as `python -m`: the working folder first on the path, the module's file as argv[0]
            sys.argv = ["-m", *script_args]
            sys.path.insert(0, os.getcwd())
            script = _module_file(module)
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        else:
            sys.argv = [script, *script_args]
            sys.path.insert(0, os.path.dirname(script))
            runpy.run_path(script, run_name="__main__")
    except SystemExit as error:
        if error.code not in (None, 0):
            _crash(script, error, error.code if isinstance(error.code, int) else 1)
    except tf.errors.ResourceExhaustedError as error:
        CHANNEL.emit(protocol.OutOfMemory(str(error.message).strip().splitlines()[0][:300]))
        os._exit(1)
    except BaseException as error:  # noqa: BLE001 - the parent shows the exit code and the error
        _crash(script, error, 1)
    recorder.finish(ended="ended")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
