"""A PNG of the step-time breakdown and, when changes were tried, of today's examples/s beside each change's (drawn
with OpenCV, already a dependency of the `profile` extra)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tfdoctor.profile.breakdown import PARTS, Breakdown
from tfdoctor.profile.what_if import Outcome

# BGR colours matching the terminal bar
_COLOURS = {"input": (0, 200, 230), "sync": (200, 60, 200), "host": (220, 200, 40), "compute": (60, 180, 60)}


ROW = 28  # pixels per change in the what-if panel


def write_png(path: Path, title: str, result: Breakdown, verdict: str, tried: list[Outcome] | None = None) -> Path:
    import cv2
    import numpy as np

    measured = [outcome for outcome in tried or [] if outcome.applied and outcome.examples_per_s]
    width, left, bar_top, bar_height = 900, 30, 70, 60
    height = 260 + (ROW * len(measured) + 60 if measured else 0)
    canvas = np.full((height, width, 3), 255, np.uint8)
    font = cv2.FONT_HERSHEY_SIMPLEX
    cv2.putText(canvas, title[:80], (left, 35), font, 0.7, (0, 0, 0), 2, cv2.LINE_AA)
    x = left
    span = width - 2 * left
    shares = result.shares()
    for part in PARTS:
        cells = int(round(shares[part] * span))
        if cells:
            cv2.rectangle(canvas, (x, bar_top), (x + cells, bar_top + bar_height), _COLOURS[part], -1)
        x += cells
    cv2.rectangle(canvas, (left, bar_top), (left + span, bar_top + bar_height), (0, 0, 0), 1)
    for index, part in enumerate(PARTS):
        y = bar_top + bar_height + 35
        x = left + index * 215
        cv2.rectangle(canvas, (x, y - 14), (x + 16, y + 2), _COLOURS[part], -1)
        label = (f"{part} {getattr(result, part) * 1000:.1f} ms ({shares[part]:.0%})" if part in result.measured()
                 else f"{part}: not separated")
        cv2.putText(canvas, label, (x + 22, y), font, 0.5, (0, 0, 0), 1, cv2.LINE_AA)
    cv2.putText(canvas, f"median step {result.step.median * 1000:.1f} ms - {verdict}"[:95], (left, 220),
                font, 0.55, (0, 0, 0), 1, cv2.LINE_AA)
    if measured:
        _what_if_panel(canvas, measured, top=260, left=left, span=span)
    path.parent.mkdir(parents=True, exist_ok=True)
    if not cv2.imwrite(str(path), canvas):
        raise OSError(f"cannot write {path}")
    return path


def _what_if_panel(canvas: Any, measured: list[Outcome], top: int, left: int, span: int) -> None:
    """Each measured change's speed-up in examples/s over today (the line at 1.0), with its 90% interval."""
    import cv2

    font = cv2.FONT_HERSHEY_SIMPLEX
    cv2.putText(canvas, "What-if, measured: examples/s against today (1.0)", (left, top + 10), font, 0.6, (0, 0, 0), 1,
                cv2.LINE_AA)
    label_width, bars = 260, span - 260 - 190
    scale = max(max(o.interval[1] if o.interval else o.speedup or 0.0 for o in measured), 1.0) * 1.05
    x_of = lambda value: left + label_width + int(bars * value / scale)  # noqa: E731 - one short mapping
    for index, outcome in enumerate(measured):
        y = top + 30 + index * ROW
        speedup = outcome.speedup or 0.0
        colour = ((60, 180, 60) if speedup > 1 else (80, 80, 220)) if outcome.measurable else (190, 190, 190)
        cv2.putText(canvas, outcome.change[:32], (left, y + 15), font, 0.45, (0, 0, 0), 1, cv2.LINE_AA)
        cv2.rectangle(canvas, (x_of(0), y), (x_of(speedup), y + 18), colour, -1)
        if outcome.interval:
            low, high = outcome.interval
            cv2.line(canvas, (x_of(low), y + 9), (x_of(high), y + 9), (0, 0, 0), 1)
            text = f"{speedup:.2f}x ({low:.2f}-{high:.2f})" + (" step alone" if outcome.step_only else "")
            cv2.putText(canvas, text, (x_of(scale) + 8, y + 15), font, 0.42, (0, 0, 0), 1, cv2.LINE_AA)
    bottom = top + 30 + len(measured) * ROW
    cv2.line(canvas, (x_of(1.0), top + 24), (x_of(1.0), bottom), (0, 0, 0), 1)
    cv2.putText(canvas, "today", (x_of(1.0) - 20, bottom + 16), font, 0.42, (0, 0, 0), 1, cv2.LINE_AA)
