"""A PNG of the step-time breakdown (drawn with OpenCV, already a dependency of the `profile` extra)."""

from __future__ import annotations

from pathlib import Path

from tfdoctor.profile.breakdown import PARTS, Breakdown

# BGR colours matching the terminal bar
_COLOURS = {"input": (0, 200, 230), "sync": (200, 60, 200), "host": (220, 200, 40), "compute": (60, 180, 60)}


def write_png(path: Path, title: str, result: Breakdown, verdict: str) -> Path:
    import cv2
    import numpy as np

    width, height, left, bar_top, bar_height = 900, 260, 30, 70, 60
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
        label = f"{part} {getattr(result, part) * 1000:.1f} ms ({shares[part]:.0%})"
        cv2.putText(canvas, label, (x + 22, y), font, 0.5, (0, 0, 0), 1, cv2.LINE_AA)
    cv2.putText(canvas, f"median step {result.step.median * 1000:.1f} ms - {verdict}"[:95], (left, height - 40),
                font, 0.55, (0, 0, 0), 1, cv2.LINE_AA)
    path.parent.mkdir(parents=True, exist_ok=True)
    if not cv2.imwrite(str(path), canvas):
        raise OSError(f"cannot write {path}")
    return path
