"""What a notebook's saved outputs show of the run that made them: how many replicas its strategy had."""

from __future__ import annotations

import re

from tfdoctor.lint.notebooks import Notebook, output_text

# TensorFlow's log line when a MirroredStrategy starts, with the tuple of devices it mirrors the model over
_MIRRORED_DEVICES = re.compile(r"Using MirroredStrategy with devices \(([^)]*)\)")
# A line that a cell printing `strategy.num_replicas_in_sync` printed: `REPLICAS:  1`, `Number of devices: 8`
_COUNT_LINE = re.compile(r"(?i)\b(?:replicas?|devices?)\b[^0-9\n]{0,24}?\b(\d+)\s*$")


def recorded_replicas(notebook: Notebook) -> tuple[int, ...]:
    """The replica counts that a notebook's saved outputs show: the device count of each MirroredStrategy that
    TensorFlow logged it started, and each count printed by a cell that prints `num_replicas_in_sync`. Empty
    when none shows."""
    counts: list[int] = []
    for cell in notebook.cells:
        outputs = notebook.data["cells"][cell.number - 1].get("outputs")
        prints_count = any("num_replicas_in_sync" in line and "print" in line for line in cell.lines)
        for output in outputs if isinstance(outputs, list) else ():
            text = output_text(output) if isinstance(output, dict) else ""
            counts += [len([d for d in m.group(1).split(",") if d.strip()]) for m in _MIRRORED_DEVICES.finditer(text)]
            if prints_count:
                counts += [int(m.group(1)) for line in text.splitlines() if (m := _COUNT_LINE.search(line))]
    return tuple(counts)
