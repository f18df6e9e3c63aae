"""`--fix` for notebooks: fix the joined code cells as one module, then write back only the cells whose code
changed; outputs, metadata, IPython lines and the JSON layout stay as they were."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from tfdoctor.config import Settings
from tfdoctor.lint.findings import Finding
from tfdoctor.lint.source_fixes import FixResult, fix_source
from tfdoctor.lint.notebooks import NotebookError, read_notebook
from tfdoctor.lint.recorded_runs import recorded_replicas


def fix_notebook(source: bytes, display_path: str, settings: Settings, path: Path | None = None,
                 unsafe: bool = False, wanted: Callable[[Finding], bool] | None = None) -> FixResult[bytes]:
    """The notebook's bytes with fixes applied, and the fixed findings placed by cell. A file that is not a
    notebook is left alone (linting reports it); NotebookError when a rewrite cannot be split back into cells.
    `wanted` as in `fix_source`, judging findings placed by cell."""
    try:
        notebook = read_notebook(source)
    except NotebookError:
        return FixResult(source)
    by_cell = None if wanted is None else (lambda finding: wanted(notebook.to_cells([finding])[0]))
    result = fix_source(notebook.python.encode(), display_path, settings, path, unsafe, by_cell,
                        recorded_replicas(notebook))
    if not result.fixed:
        return FixResult(source)
    fixed = notebook.with_python(result.text.decode())
    return FixResult(fixed.dumps(source), notebook.to_cells(result.fixed), result.descriptions)
