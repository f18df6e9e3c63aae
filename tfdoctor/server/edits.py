"""A rewritten text as the smallest LSP edit: one replacement between the common beginning and end."""

from __future__ import annotations

import os

from lsprotocol import types
from pygls.workspace import PositionCodec

from tfdoctor.server.documents import LINE_BREAK, Part


def text_edit(part: Part, new: str, codec: PositionCodec) -> types.TextEdit | None:
    """The edit turning `part`'s text into `new`; None when they are the same."""
    old = part.text
    if old == new:
        return None
    start = len(os.path.commonprefix([old, new]))
    if 0 < start < len(old) and old[start - 1] == "\r" and old[start] == "\n":
        start -= 1  # never between the two characters of one line break
    room = min(len(old), len(new)) - start
    end = len(os.path.commonprefix([old[::-1], new[::-1]])[:room])
    if 0 < end < len(old) - start and old[len(old) - end] == "\n" and old[len(old) - end - 1] == "\r":
        end -= 1
    lines = part.lines
    return types.TextEdit(
        range=types.Range(start=_position(old, start, lines, codec), end=_position(old, len(old) - end, lines, codec)),
        new_text=new[start:len(new) - end],
    )


def _position(text: str, offset: int, lines: list[str], codec: PositionCodec) -> types.Position:
    line, column = 0, offset
    for line, match in enumerate(LINE_BREAK.finditer(text, 0, offset), 1):
        column = offset - match.end()
    return codec.position_to_client_units(lines, types.Position(line=line, character=column))


def workspace_edit(changes: list[tuple[Part, types.TextEdit]], versioned: bool) -> types.WorkspaceEdit:
    """One edit per document: versioned (`documentChanges`) when the client takes them, else `changes`."""
    if versioned:
        return types.WorkspaceEdit(document_changes=[
            types.TextDocumentEdit(
                text_document=types.OptionalVersionedTextDocumentIdentifier(uri=part.uri, version=part.version),
                edits=[edit],
            ) for part, edit in changes
        ])
    return types.WorkspaceEdit(changes={part.uri: [edit] for part, edit in changes})
