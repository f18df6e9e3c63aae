"""Fix one module's source: lint it, apply every non-overlapping fix in one transform, re-parse, and repeat
until nothing changes (a fix can reveal another, and of nested fixes, such as a chain of `interleave` calls
each inside the next, one pass applies only the outermost). Each pass fixes at least one finding, so the
passes are bounded by MAX_PASSES plus the fixable findings of the first. Nothing is read or written here
(fixes.py does files)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Generic, TypeVar

import libcst as cst

from tfdoctor.config import Settings
from tfdoctor.lint.deep_stack import deep_stack
from tfdoctor.lint.engine import Reported, check_module, parse_source
from tfdoctor.lint.findings import Finding

MAX_PASSES = 10
Source = TypeVar("Source", str, bytes)


@dataclass
class FixResult(Generic[Source]):
    text: Source
    fixed: list[Finding] = field(default_factory=list)  # positions are those of the text the fix was made on
    descriptions: list[str] = field(default_factory=list)  # what each fix did, parallel to `fixed`


class _Replace(cst.CSTTransformer):
    def __init__(self, replacements: dict[int, cst.CSTNode]) -> None:
        super().__init__()
        self.replacements = replacements

    def on_leave(self, original_node: cst.CSTNode, updated_node: cst.CSTNode) -> cst.CSTNode:  # type: ignore[override]
        return self.replacements.get(id(original_node), updated_node)


@deep_stack
def fix_source(source: Source, display_path: str, settings: Settings, path: Path | None = None,
               unsafe: bool = False, wanted: Callable[[Finding], bool] | None = None,
               recorded_replicas: tuple[int, ...] = ()) -> FixResult[Source]:
    """The source with fixes applied (same type as given: text or bytes) and the findings they fixed.
    With `wanted`, only the findings it accepts are fixed, in one pass (an editor's fix for one finding)."""
    result: FixResult[Source] = FixResult(source)
    passes, limit = 0, MAX_PASSES if wanted is None else 1
    while passes < limit:
        passes += 1
        raw = result.text.encode("utf-8") if isinstance(result.text, str) else result.text
        module = parse_source(raw, display_path, settings, path)
        if not isinstance(module, cst.Module):
            break
        fixable = [
            r for r in check_module(module, display_path, settings, path, recorded_replicas=recorded_replicas)
            if r.violation.fix is not None and r.fix_span is not None and (r.violation.fix.safe or unsafe)
            and (wanted is None or wanted(r.finding))
        ]
        if passes == 1 and wanted is None:
            limit = MAX_PASSES + len(fixable)
        chosen = _non_overlapping(fixable)
        if not chosen:
            break
        fixed = module.visit(_Replace({id(r.violation.fix.old): r.violation.fix.new for r in chosen}))  # type: ignore[union-attr]
        text = fixed.code if isinstance(source, str) else fixed.bytes
        if text == result.text:
            break
        result = FixResult(text, result.fixed + [r.finding for r in chosen],  # type: ignore[arg-type]
                           result.descriptions + [r.violation.fix.description for r in chosen])  # type: ignore[union-attr]
    return result


def _non_overlapping(reported: list[Reported]) -> list[Reported]:
    chosen: list[Reported] = []
    for candidate in sorted(reported, key=lambda r: r.fix_span):  # type: ignore[arg-type, return-value]
        start, _ = candidate.fix_span  # type: ignore[misc]
        if not chosen or chosen[-1].fix_span[1] <= start:  # type: ignore[index]
            chosen.append(candidate)
    return chosen
