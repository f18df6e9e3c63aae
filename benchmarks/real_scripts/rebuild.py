"""Rebuild the real training scripts outside the repository, from their `script.json` and `offline.patch`.

For every folder benchmarks/real_scripts/<name>/ with a `script.json`, writes the files it names at its
commit, keeping their paths, from the local bare mirror (MIRRORS/owner+name/repo, as the `fetch` tool leaves
it) into DEST/<name>/, then applies the folder's `offline.patch` there with `git apply`. A script already
built from the same commit, files and patch is left alone; one that cannot be built gets one line on stderr
and the others go on. Usage:

    python benchmarks/real_scripts/rebuild.py [--dest /work/real_scripts] [--mirrors /work/.mirror] [--only NAME]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

HERE = Path(__file__).resolve().parent
DEFAULT_DEST = Path("/work/real_scripts")
DEFAULT_MIRRORS = Path("/work/.mirror")
STAMP = ".real_scripts_stamp"


class BuildError(Exception):
    """A script that cannot be built; the message is one line."""


@dataclass(frozen=True)
class Script:
    """One script.json and the folder it lives in."""

    folder: Path
    name: str
    repo: str
    commit: str
    files: tuple[str, ...]

    @property
    def patch(self) -> Path:
        return self.folder / "offline.patch"

    def fingerprint(self) -> str:
        """What the built folder depends on: commit, files and patch."""
        digest = hashlib.sha256("\n".join((self.repo, self.commit, *self.files)).encode())
        if self.patch.is_file():
            digest.update(self.patch.read_bytes())
        return digest.hexdigest()


def read_script(folder: Path) -> Script:
    """The script described by folder/script.json."""
    try:
        data = json.loads((folder / "script.json").read_text())
        return Script(folder, data["name"], data["repo"], data["commit"], tuple(data["files"]))
    except (OSError, ValueError, KeyError) as exc:
        raise BuildError(f"{folder.name}/script.json: {exc}") from None


def all_scripts() -> list[Path]:
    """Every script folder under benchmarks/real_scripts/."""
    return sorted(path.parent for path in HERE.glob("*/script.json"))


def mirror_of(repo: str, mirrors: Path) -> Path:
    """The local bare mirror of a repository."""
    base = mirrors / repo.replace("/", "+")
    for candidate in (base / "repo", base / "repo" / ".git", base):
        if (candidate / "HEAD").is_file() and (candidate / "objects").is_dir():
            return candidate
    raise BuildError(f"no mirror of {repo} under {mirrors} (fetch github:{repo})")


def run(args: list[str], cwd: Path | None = None, stdin: bytes | None = None) -> bytes:
    """Runs a command and returns its stdout; a failure is a BuildError with its last stderr line."""
    env = {**os.environ, "GIT_CEILING_DIRECTORIES": str(cwd.parent) if cwd else ""}  # no enclosing repository
    done = subprocess.run(args, cwd=cwd, input=stdin, capture_output=True, env=env)
    if done.returncode != 0:
        lines = done.stderr.decode(errors="replace").strip().splitlines()
        raise BuildError(lines[-1] if lines else f"{' '.join(args[:3])} failed")
    return done.stdout


def build(script: Script, dest: Path, mirrors: Path) -> str:
    """Builds one script into DEST/<name>; returns what was done."""
    final = dest / script.name
    stamp = final / STAMP
    fingerprint = script.fingerprint()
    if stamp.is_file() and stamp.read_text().strip() == fingerprint:
        return "up to date"
    git_dir = mirror_of(script.repo, mirrors)
    dest.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{script.name}.", dir=dest))
    staging.chmod(0o755)
    try:
        for path in script.files:
            if ".." in PurePosixPath(path).parts:
                raise BuildError(f"{path}: a path outside the folder")
            target = staging / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(run(["git", f"--git-dir={git_dir}", "show", f"{script.commit}:{path}"]))
        patched = script.patch.is_file()
        if patched:
            run(["git", "apply", "--whitespace=nowarn", str(script.patch)], cwd=staging)
        stamp_path = staging / STAMP
        stamp_path.write_text(fingerprint + "\n")
        if final.exists():
            shutil.rmtree(final)
        staging.rename(final)
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    return f"{len(script.files)} files at {script.commit[:12]}{', patched' if patched else ''}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dest", type=Path, default=DEFAULT_DEST, help=f"where the scripts go ({DEFAULT_DEST})")
    parser.add_argument("--mirrors", type=Path, default=DEFAULT_MIRRORS,
                        help=f"folder of local bare mirrors named owner+name ({DEFAULT_MIRRORS})")
    parser.add_argument("--only", action="append", help="build only this script (repeatable)")
    args = parser.parse_args(argv)
    folders = [f for f in all_scripts() if not args.only or f.name in args.only]
    failed = 0
    for folder in folders:
        try:
            print(f"{folder.name}: {build(read_script(folder), args.dest, args.mirrors)}")
        except (BuildError, OSError) as exc:
            failed += 1
            print(f"{folder.name}: cannot build: {exc}", file=sys.stderr)
    print(f"{len(folders) - failed} of {len(folders)} scripts in {args.dest}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
