"""Code actions on tfdoctor's diagnostics: "Fix" one finding (safe fixes; unsafe ones too when the client's
settings ask), "Fix all safe" in the file, and "Suppress with `# noqa: CODE`".

Fixes run through the same fixer as `tfdoctor lint --fix` (`fix_source`, `fix_notebook`), on the text the
editor has now; a diagnostic from an older version of the text matches no finding and gets no fix.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Any, Sequence

from lsprotocol import types

from tfdoctor.config import Settings, settings_for
from tfdoctor.lint.engine import with_noqa
from tfdoctor.lint.findings import Finding
from tfdoctor.lint.source_fixes import FixResult, fix_source
from tfdoctor.lint.notebook_fixes import fix_notebook
from tfdoctor.server.diagnostics import SOURCE, key
from tfdoctor.server.documents import Snapshot, cell_texts
from tfdoctor.server.edits import text_edit, workspace_edit

FIX_ALL_KIND = "source.fixAll.tfdoctor"
_LINES = re.compile(r"(\r\n|\r|\n)")


@dataclass(frozen=True)
class Options:
    """The client's settings (`initializationOptions`, or `tfdoctor` in `workspace/didChangeConfiguration`)."""

    unsafe_fixes: bool = False

    @classmethod
    def parse(cls, value: Any) -> Options:
        table = value.get("tfdoctor", value) if isinstance(value, dict) else {}
        return cls(unsafe_fixes=table.get("unsafeFixes") is True if isinstance(table, dict) else False)


def code_actions(snapshot: Snapshot, params: types.CodeActionParams, findings: list[Finding], options: Options,
                 versioned: bool) -> list[types.CodeAction]:
    """The actions for the diagnostics the client sent, and "Fix all safe" when the file has a fixable one."""
    settings = settings_for(snapshot.path)
    only = params.context.only
    ours = [d for d in params.context.diagnostics if d.source == SOURCE and isinstance(d.data, dict)]
    actions: list[types.CodeAction] = []
    for diagnostic in ours if _wanted(types.CodeActionKind.QuickFix, only) else []:
        if diagnostic.data.get("fixable"):
            wanted = {name: diagnostic.data.get(name) for name in ("code", "line", "column", "cell")}
            result = _fixed(snapshot, settings, options.unsafe_fixes, lambda f: key(f) == wanted)
            edit = _edit(snapshot, result, versioned)
            if edit is not None:
                actions.append(types.CodeAction(
                    title=f"Fix {wanted['code']}: {result.descriptions[0]}", kind=types.CodeActionKind.QuickFix,
                    diagnostics=[diagnostic], edit=edit, is_preferred=True))
        actions.extend(_suppression(snapshot, diagnostic, versioned))
    fix_all_kinds = [kind for kind, asked in ((types.CodeActionKind.QuickFix, bool(ours)), (FIX_ALL_KIND, True))
                     if asked and _wanted(kind, only)]
    if fix_all_kinds and any(f.fixable for f in findings):
        result = _fixed(snapshot, settings, False, None)
        edit = _edit(snapshot, result, versioned)
        if edit is not None:
            actions.extend(types.CodeAction(title="Fix all safe tfdoctor findings in file", kind=kind, edit=edit)
                           for kind in fix_all_kinds)
    return actions


def _wanted(kind: str, only: Sequence[str] | None) -> bool:
    return only is None or any(kind == asked or kind.startswith(f"{asked}.") for asked in only)


def _fixed(snapshot: Snapshot, settings: Settings, unsafe: bool, wanted: Any) -> FixResult[bytes]:
    fixer = fix_notebook if snapshot.notebook else fix_source
    return fixer(snapshot.source, str(snapshot.path), settings, snapshot.path, unsafe, wanted)


def _edit(snapshot: Snapshot, result: FixResult[bytes], versioned: bool) -> types.WorkspaceEdit | None:
    if not result.fixed:
        return None
    texts = (cell_texts(result.text) if snapshot.notebook
             else [result.text.decode("utf-8", errors="surrogatepass")])
    changes = [(part, edit) for part, text in zip(snapshot.parts, texts)
               if (edit := text_edit(part, text, snapshot.codec)) is not None]
    return workspace_edit(changes, versioned) if changes else None


def _suppression(snapshot: Snapshot, diagnostic: types.Diagnostic, versioned: bool) -> list[types.CodeAction]:
    """`# noqa: CODE` on the first line of the finding's statement, else on its own line: the first of the two
    where the comment leaves the code's meaning as it was (not inside a string)."""
    code, data = str(diagnostic.code), diagnostic.data
    part = snapshot.part(data.get("cell"))
    if part is None:
        return []
    pieces = _LINES.split(part.text)  # lines at even indices, their line breaks between them
    for number in dict.fromkeys((data.get("statement_line"), data.get("line"))):
        if not isinstance(number, int) or not 0 < number <= (len(pieces) + 1) // 2:
            continue
        line = pieces[2 * (number - 1)]
        changed = with_noqa(line, code)
        if changed == line:
            continue
        text = "".join(pieces[:2 * (number - 1)] + [changed] + pieces[2 * number - 1:])
        edit = text_edit(part, text, snapshot.codec)
        if edit is not None and _same_meaning(part.text, text):
            return [types.CodeAction(title=f"Suppress with `# noqa: {code}`", kind=types.CodeActionKind.QuickFix,
                                     diagnostics=[diagnostic], edit=workspace_edit([(part, edit)], versioned))]
    return []


def _same_meaning(before: str, after: str) -> bool:
    """Whether both texts parse to the same tree; True when `before` does not parse (nothing to compare)."""
    try:
        old = ast.dump(ast.parse(before))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return True
    try:
        return ast.dump(ast.parse(after)) == old
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
