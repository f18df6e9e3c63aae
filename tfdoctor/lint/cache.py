"""Findings cached per file in `.tfdoctor_cache/`, next to the configuration (the folder of the pyproject.toml
with `[tool.tfdoctor]`, else the working directory).

An entry is keyed by the file's bytes, the tfdoctor version, the effective settings for that path (the
enabled codes and the target versions) and a digest of tfdoctor's own linter source, so editing a rule
invalidates it. It also lists the other project modules the findings used (the project layer reads them
for evidence) with the digests of their bytes, and the listing of a project whose files were searched for
the callers of a function (`listing.py`): when one of them changes, the entry is not used. Entries are
written atomically; one that cannot be read is ignored, and a cache that cannot be written is skipped with
one warning.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Sequence

from tfdoctor import __version__
from tfdoctor.config import Settings
from tfdoctor.lint.findings import Finding, Related, Severity
from tfdoctor.lint.listing import listing_digest
from tfdoctor.lint.rule import Rule
from tfdoctor.lint.versions import Targets

CACHE_DIR = ".tfdoctor_cache"
_LAYOUT = "v2"
_TAG = "Signature: 8a477f597d28d172789f06886806bc55\n# tfdoctor's cache: `tfdoctor clean` removes it.\n"


class Cache:
    """The findings cache under one folder."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.warning: str | None = None  # set once when the cache cannot be written

    @staticmethod
    @lru_cache(maxsize=None)
    def at(root: Path) -> Cache:
        return Cache(root / CACHE_DIR)

    @classmethod
    def for_settings(cls, settings: Settings) -> Cache:
        return cls.at(settings.root.resolve())

    def key(self, source: bytes, path: Path, rules: Sequence[Rule], targets: Targets) -> str:
        """The entry for a file's bytes linted with these rules enabled and these targets."""
        codes = ",".join(rule.code for rule in rules)
        digest = hashlib.sha256(source)
        digest.update(f"\0{path.suffix}\0{codes}\0{targets!r}\0{_code_digest()}".encode())
        return digest.hexdigest()

    def get(self, key: str, display_path: str) -> list[Finding] | None:
        """The cached findings of a file, with `display_path` as their path; None when not cached."""
        try:
            entry = json.loads(self._entry(key).read_bytes())
            if not _unchanged(entry["used"]):
                return None
            return [_decode(finding, display_path) for finding in entry["findings"]]
        except (OSError, ValueError, TypeError, KeyError, AttributeError):
            return None  # missing or corrupt: lint the file again

    def put(self, key: str, findings: list[Finding], used: Sequence[tuple[str, str]] = ()) -> None:
        """Store a file's findings and the (path, sha256) of every other module they used."""
        if self.warning is not None:
            return
        entry = self._entry(key)
        try:
            entry.parent.mkdir(parents=True, exist_ok=True)
            self._mark()
            handle, temporary = tempfile.mkstemp(dir=entry.parent, prefix=".tmp-")
            with os.fdopen(handle, "wb") as stream:
                stream.write(json.dumps({"findings": [_encode(finding) for finding in findings],
                                         "used": [list(pair) for pair in used]}).encode())
            os.replace(temporary, entry)
        except OSError as error:
            self.warning = f"{self.folder}: cannot write the cache ({error.strerror or error}); linting without it"

    def _entry(self, key: str) -> Path:
        return self.folder / _LAYOUT / key[:2] / f"{key[2:]}.json"

    def _mark(self) -> None:
        """Tag the folder as a cache (backup tools skip it) and keep it out of git."""
        tag = self.folder / "CACHEDIR.TAG"
        if not tag.exists():
            tag.write_text(_TAG, encoding="utf-8")
            (self.folder / ".gitignore").write_text("*\n", encoding="utf-8")


def _encode(finding: Finding) -> dict[str, object]:
    entry = finding.to_json()
    del entry["path"]
    entry["statement_line"] = finding.statement_line
    return entry


def _decode(entry: dict[str, object], display_path: str) -> Finding:
    fields = dict(entry, path=display_path, severity=Severity(entry["severity"]),
                  related=tuple(Related(**place) for place in entry.get("related", ())))  # type: ignore[arg-type, union-attr]
    return Finding(**fields)  # type: ignore[arg-type]


def _unchanged(used: list[list[str]]) -> bool:
    """Whether every other module an entry's findings used still has the same bytes, and every project
    whose files were searched for callers the same listing."""
    for path, digest in used:
        try:
            if path.endswith(os.sep):
                if listing_digest(Path(path)) != digest:
                    return False
            elif hashlib.sha256(Path(path).read_bytes()).hexdigest() != digest:
                return False
        except OSError:
            return False
    return True


@lru_cache(maxsize=1)
def _code_digest() -> str:
    """A digest of the linter's own source: a changed rule, fact or engine never reads stale findings."""
    package = Path(__file__).resolve().parent.parent
    digest = hashlib.sha256(__version__.encode())
    for source in sorted([*package.glob("lint/**/*.py"), *package.glob("rules/*.py"), package / "config.py"]):
        digest.update(source.relative_to(package).as_posix().encode() + b"\0" + source.read_bytes())
    return digest.hexdigest()
