"""Evidence from other modules: how a value found through another project module is described."""

from __future__ import annotations

import libcst as cst

from tfdoctor.lint.findings import Evidence
from tfdoctor.lint.semantic.model import SemanticModel, Step


def evidence_for(via: tuple[Step, ...], what: str, model: SemanticModel, node: cst.CSTNode) -> tuple[Evidence, ...]:
    """"<what> from `helper`" at the node that makes it so, in the module it lies in."""
    if not via:
        return ()
    return (Evidence(f"{what} from `{via[-1].callee.name}`", model.path, model, node),)


__all__ = ["Evidence", "evidence_for"]
