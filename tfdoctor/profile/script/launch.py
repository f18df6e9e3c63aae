"""The child process of script mode: set up the replica devices, install the hooks, run the user's script
as `__main__` with its own arguments, and print the measurements as JSON event lines on stdout.

    python -m tfdoctor.profile.script.launch '{"gpus": 2, "steps": 10, ...}' train.py ARGS
    python -m tfdoctor.profile.script.launch '{"gpus": 2, "steps": 10, ...}' -m pkg.train ARGS

The script's own output goes to stderr so that it never splits an event line. The process ends as soon as
the result is out (the rest of the training is not needed); a script that ends first is measured on the
steps it ran.
"""

from __future__ import annotations

import importlib.util
import json
import os
import runpy
import sys
import threading
import time
import traceback
from typing import Any

from tfdoctor.profile.worker import emit


def _event(event: str, **fields: Any) -> None:
    sys.__stdout__.write("\n")  # the script may have left a line unfinished
    emit(event, **fields)


def _progress(phase: str, done: int, total: int) -> None:
    _event("progress", phase=phase, done=done, total=total)


def _finished(result: dict[str, Any]) -> None:
    """Report and end the process: after the window the script's training is not needed."""
    if "full" in result:
        _event("result", **result)
        code = 0
    else:
        _event("nostep", **result)
        code = 3
    sys.stderr.flush()
    os._exit(code)


def _watchdog(recorder: Any, seconds: float) -> None:
    """After `seconds`: no step yet is an error; a partial window is measured at the next step."""
    time.sleep(seconds)
    if recorder.seen == 0:
        _finished({"steps_seen": 0, "hooked": sorted(recorder.hooked), "ended": f"ran {seconds:.0f} s"})
    recorder.deadline = time.perf_counter()


def _crash(script: str, error: BaseException, code: int) -> None:
    frames = [f for f in traceback.extract_tb(error.__traceback__) if os.path.abspath(f.filename) == script]
    where = f" at {os.path.relpath(script)}:{frames[-1].lineno}" if frames else ""
    text = f"{type(error).__name__}: {str(error).strip().splitlines()[0] if str(error).strip() else ''}"
    _event("crash", code=code, message=f"{text}{where}"[:400])
    traceback.print_exception(error)
    sys.stderr.flush()
    os._exit(code)


def _module_file(name: str) -> str:
    """The file `runpy.run_module` will run (a package's `__main__`), for the crash line; imports the parent
    packages, as running the module does anyway."""
    spec = importlib.util.find_spec(name)
    if spec is not None and spec.submodule_search_locations:
        spec = importlib.util.find_spec(f"{name}.__main__")
    return os.path.abspath(spec.origin) if spec is not None and spec.origin else name


def main(argv: list[str]) -> int:
    config, module = json.loads(argv[1]), argv[3] if argv[2] == "-m" else None
    script, script_args = (module, argv[4:]) if module else (os.path.abspath(argv[2]), argv[3:])
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    from tfdoctor.profile.script import hooks
    from tfdoctor.profile.script.recorder import Recorder
    from tfdoctor.reference.devices import setup_replicas

    _, kind, names = setup_replicas(int(config["gpus"]))
    _event("devices", kind=kind, names=names)
    recorder = Recorder(int(config["steps"]), int(config["warmup"]), _finished, _progress,
                        config.get("trace_dir"), int(config.get("trace_steps", 3)))
    hooks.install(recorder, names)
    threading.Thread(target=_watchdog, args=(recorder, float(config["max_seconds"])), daemon=True).start()
    sys.stdout = sys.stderr
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
        _event("oom", message=str(error.message).strip().splitlines()[0][:300])
        os._exit(1)
    except BaseException as error:  # noqa: BLE001 - the parent shows the exit code and the error
        _crash(script, error, 1)
    recorder.finish(ended="ended")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
