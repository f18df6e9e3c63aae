"""What a notebook's saved outputs show of the run that made them: how many replicas its strategy had."""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

from tfdoctor.lint.notebooks import NotebookError, output_text, read_notebook

# TensorFlow's log line when a MirroredStrategy starts, with the tuple of devices it mirrors the model over
_MIRRORED_DEVICES = re.compile(r"Using MirroredStrategy with devices \(([^)]*)\)")
# A line that a cell printing `strategy.num_replicas_in_sync` printed: `REPLICAS:  1`, `Number of devices: 8`
_COUNT_LINE = re.compile(r"(?i)\b(?:replicas?|devices?)\b[^0-9\n]{0,24}?\b(\d+)\s*$")


def recorded_replicas(path: str) -> tuple[int, ...]:
    """The replica counts that a notebook's saved outputs show: the device count of each MirroredStrategy that
    TensorFlow logged it started, and each count printed by a cell that prints `num_replicas_in_sync`. Empty
    when none shows, or when the path is no notebook that can be read."""
    if not path.endswith(".ipynb"):
        return ()
    try:
        stat = Path(path).stat()
        return _counts(path, stat.st_mtime_ns, stat.st_size)
    except OSError:
        return ()


@lru_cache(maxsize=64)
def _counts(path: str, mtime_ns: int, size: int) -> tuple[int, ...]:
    """Keyed by the file's time and size, not its bytes: a notebook's saved plots make it megabytes."""
    try:
        notebook = read_notebook(Path(path).read_bytes())
    except NotebookError:
        return ()
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
