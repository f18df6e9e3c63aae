"""A TensorFlow profiler trace of a few full steps, converted with xprof's own converters.

The log folder opens with `xprof --logdir DIR` (installed by the `profile` extra); the input-pipeline
analysis (step-time categories and the profiler's own statements) is read from the converted JSON and shown
beside the phase figures.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

import tensorflow as tf

from tfdoctor.profile.phases import wait
from tfdoctor.profile.workload import StepFunctions

_CATEGORIES = {
    "device_compute": "device_compute_time_ms_avg",
    "device_collectives": "device_collectives_time_ms_avg",
    "host_compute": "host_compute_time_ms_avg",
    "kernel_launch": "kernel_launch_time_ms_avg",
    "input": "infeed_time_ms_avg",
    "all_others": "other_time_ms_avg",
}


def capture(work: StepFunctions, batches: Iterator[Any], logdir: Path, steps: int) -> dict[str, Any]:
    """Trace `steps` full steps on `batches` into `logdir` and summarise xprof's input-pipeline analysis."""
    logdir.mkdir(parents=True, exist_ok=True)
    wait(work.step(next(batches)))  # warm: tracing and first-step work stay out of the trace
    tf.profiler.experimental.start(str(logdir))
    try:
        for number in range(steps):
            with tf.profiler.experimental.Trace("train", step_num=number, _r=1):
                wait(work.step(next(batches)))
    finally:
        tf.profiler.experimental.stop()
    runs = sorted(logdir.glob("plugins/profile/*/*.xplane.pb"), key=lambda p: p.stat().st_mtime)
    summary: dict[str, Any] = {"logdir": str(logdir), "xplane": str(runs[-1]) if runs else None, "xprof": None}
    if runs:
        summary["xprof"] = summarise([str(runs[-1])])
    return summary


def summarise(xplanes: list[str]) -> dict[str, Any] | None:
    """Step-time categories (ms per step) and statements from xprof's input_pipeline_analyzer tool."""
    from xprof.convert.raw_to_tool_data import xspace_to_tool_data

    data, _ = xspace_to_tool_data(xplanes, "input_pipeline_analyzer", {})
    if not data:
        return None
    tables = json.loads(data)
    properties = next((t.get("p", {}) for t in tables if "hardware_type" in t.get("p", {})), {})
    if not properties:
        return None
    return {
        "tool": "input_pipeline_analyzer",
        "hardware_type": properties.get("hardware_type"),
        "steps": len(next((t.get("rows", []) for t in tables if "hardware_type" in t.get("p", {})), [])),
        "ms_per_step": {name: _number(properties.get(key)) for name, key in _CATEGORIES.items()},
        "step_ms": _number(properties.get("steptime_ms_average")),
        "statements": [s for s in (properties.get("summary_text"), properties.get("all_other_statement"),
                                   properties.get("device_collectives_statement"),
                                   properties.get("kernel_launch_statement")) if s],
    }


def _number(text: Any) -> float | None:
    try:
        return float(text)
    except (TypeError, ValueError):
        return None
