"""An open document or notebook as the engine lints it: its bytes, its path (for the settings), and its
parts (the text document, or one per notebook cell) with the text that positions are counted in.

A notebook synced through LSP 3.17 notebook documents becomes an nbformat 4 notebook built from its cells,
so it is linted (cells joined in order, IPython lines skipped) and fixed exactly as an `.ipynb` file is.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from urllib.parse import unquote

from lsprotocol import types
from pygls.uris import to_fs_path
from pygls.workspace import PositionCodec, Workspace

from tfdoctor.config import settings_for
from tfdoctor.lint.engine import lint_notebook, lint_source
from tfdoctor.lint.findings import Finding

LINE_BREAK = re.compile(r"\r\n|\r|\n")


@dataclass(frozen=True)
class Part:
    """A text document the client knows: a file, or one notebook cell ("" text for a cell not synced)."""

    uri: str
    version: int | None
    text: str

    @cached_property
    def lines(self) -> list[str]:
        """The lines as LSP counts them (split at \\r\\n, \\r or \\n); split once per snapshot."""
        return LINE_BREAK.split(self.text)


@dataclass(frozen=True)
class Snapshot:
    """What one lint of an open document reads, at one moment."""

    uri: str  # the text document's or the notebook's
    path: Path
    source: bytes
    notebook: bool
    parts: tuple[Part, ...]  # a notebook's cells in order: cell number N is parts[N - 1]
    codec: PositionCodec

    def part(self, cell: int | None) -> Part | None:
        index = (cell or 1) - 1
        return self.parts[index] if 0 <= index < len(self.parts) else None


def encode(text: str) -> bytes:
    """Editor text as bytes; a lone surrogate survives (and the engine reports the file as undecodable)."""
    return text.encode("utf-8", errors="surrogatepass")


def path_of(uri: str) -> Path:
    """The file a URI names; an unsaved buffer (`untitled:`) is taken to live in the working folder."""
    path = to_fs_path(uri)
    return Path(path) if path else Path.cwd() / (Path(unquote(uri.split(":", 1)[-1])).name or "untitled.py")


def text_snapshot(workspace: Workspace, uri: str) -> Snapshot | None:
    document = workspace.text_documents.get(unquote(uri))
    if document is None:
        return None
    text = document.source
    return Snapshot(uri, path_of(uri), encode(text), False, (Part(uri, document.version, text),),
                    workspace.position_codec)


def notebook_snapshot(workspace: Workspace, uri: str) -> Snapshot | None:
    notebook = workspace.get_notebook_document(notebook_uri=uri)
    if notebook is None:
        return None
    parts, cells = [], []
    for cell in notebook.cells:
        document = workspace.text_documents.get(unquote(cell.document))
        text = document.source if document is not None else ""
        parts.append(Part(cell.document, document.version if document else None, text))
        python = cell.kind == types.NotebookCellKind.Code and (document is None or document.language_id in (None, "python"))
        cells.append({"cell_type": "code", "metadata": {}, "source": text, "outputs": [], "execution_count": None}
                     if python else {"cell_type": "markdown", "metadata": {}, "source": text})
    data = {"nbformat": 4, "nbformat_minor": 5, "metadata": notebook.metadata or {}, "cells": cells}
    source = encode(json.dumps(data, indent=1, ensure_ascii=False))
    return Snapshot(uri, path_of(uri), source, True, tuple(parts), workspace.position_codec)


def cell_texts(notebook_json: bytes) -> list[str]:
    """The cells' text of a notebook built by `notebook_snapshot` (after a fix rewrote it)."""
    return ["".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
            for cell in json.loads(notebook_json)["cells"]]


def lint_snapshot(snapshot: Snapshot) -> list[Finding]:
    """The engine's findings for an open document, exactly as `tfdoctor lint` gives them for that file: the
    same settings (its nearest `[tool.tfdoctor]`, then the pins above it), read afresh, and the same calls."""
    lint = lint_notebook if snapshot.notebook else lint_source
    return lint(snapshot.source, str(snapshot.path), settings_for(snapshot.path, source=snapshot.source), snapshot.path)
