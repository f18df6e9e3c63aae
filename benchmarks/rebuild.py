"""Rebuild the development corpus of real code outside the repository, from the corpus manifests.

For every repository a manifest names, writes the project's `.py`, `.ipynb`, `pyproject.toml`, `setup.py`,
`setup.cfg`, `requirements*.txt` and `environment.yml` files at the manifest's commit into DEST/owner__name/ (the whole
project, since the linter reads the modules a file imports), and an empty `.git` folder where a clone has
its own, so that the project root is found as in a real checkout. Files come from a local bare mirror when one
exists (MIRRORS/owner+name/repo or repo/.git, as the `fetch` tool leaves them), else from a blob-less, sparse clone of
GitHub. A repository already present at its commit is left alone; one that cannot be had gets one line on
stderr and the others go on. Usage:

    python benchmarks/rebuild.py [--manifest M.json ...] [--dest /work/corpus/files] [--mirrors /work/.mirror]
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

HERE = Path(__file__).resolve().parent
DEFAULT_DEST = Path("/work/corpus/files")
DEFAULT_MIRRORS = Path("/work/.mirror")
GITHUB_URL = "https://github.com/{repo}.git"
KEPT = ("*.py", "*.ipynb", "pyproject.toml", "setup.py", "setup.cfg", "requirements*.txt", "environment.yml",
        "environment.yaml")  # the files the linter reads: code, and where the versions are pinned
STAMP = ".corpus_commit"
CHECKOUT_MARKER = ".git"  # an empty folder: the linter finds the project root where a real clone has it
REGULAR_FILE_MODES = {"100644", "100755"}


class RebuildError(Exception):
    """A repository that cannot be rebuilt; the message is one line."""


@dataclass(frozen=True)
class RepoPin:
    """One repository at one commit."""

    repo: str
    commit: str

    @property
    def folder(self) -> str:
        """The corpus folder name: owner__name."""
        return self.repo.replace("/", "__")


def default_manifests() -> list[Path]:
    """Every manifest under benchmarks/corpus/."""
    return sorted((HERE / "corpus").glob("*.json"))


def read_pins(manifests: list[Path]) -> list[RepoPin]:
    """The repositories of all manifests, once each (a repository pinned to two commits is an error)."""
    pins: dict[str, RepoPin] = {}
    for manifest in manifests:
        try:
            data = json.loads(manifest.read_text())
        except (OSError, ValueError) as exc:
            raise RebuildError(f"{manifest}: cannot read the manifest: {exc}") from None
        for entry in data.get("repos", []):
            pin = RepoPin(entry["repo"], entry["commit"])
            known = pins.get(pin.repo)
            if known is not None and known.commit != pin.commit:
                raise RebuildError(f"{manifest}: {pin.repo} is pinned to {known.commit} elsewhere")
            pins[pin.repo] = pin
    return list(pins.values())


def kept(path: str) -> bool:
    """Whether a file of the project belongs in the corpus."""
    name = PurePosixPath(path).name
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in KEPT)


def git(git_dir: Path, *args: str, stdin: bytes | None = None) -> bytes:
    """Runs git on one repository and returns its stdout; a failure is a RebuildError."""
    done = subprocess.run(["git", f"--git-dir={git_dir}", *args], input=stdin, capture_output=True)
    if done.returncode != 0:
        message = done.stderr.decode(errors="replace").strip().splitlines()
        raise RebuildError(message[-1] if message else f"git {args[0]} failed")
    return done.stdout


def mirror_of(pin: RepoPin, mirrors: Path) -> Path | None:
    """The local bare mirror of a repository, if one exists."""
    base = mirrors / pin.repo.replace("/", "+")
    for candidate in (base / "repo", base / "repo" / ".git", base):
        if (candidate / "HEAD").is_file() and (candidate / "objects").is_dir():
            return candidate
    return None


def export_from_git(git_dir: Path, commit: str, into: Path) -> int:
    """Writes the kept files of one commit into a folder; returns how many (blobs a mirror lacks are skipped)."""
    try:
        git(git_dir, "cat-file", "-e", f"{commit}^{{commit}}")
    except RebuildError:
        raise RebuildError(f"commit {commit} is not in {git_dir}") from None
    listing = git(git_dir, "ls-tree", "-r", "-z", commit).split(b"\0")
    wanted: list[tuple[str, str]] = []
    for row in filter(None, listing):
        meta, _, raw_path = row.partition(b"\t")
        mode, kind, oid = meta.decode().split()
        path = raw_path.decode(errors="surrogateescape")
        if kind == "blob" and mode in REGULAR_FILE_MODES and kept(path) and ".." not in PurePosixPath(path).parts:
            wanted.append((oid, path))
    blobs = git(git_dir, "cat-file", "--batch", stdin="".join(f"{oid}\n" for oid, _ in wanted).encode())
    offset, written = 0, 0
    for oid, path in wanted:
        header_end = blobs.index(b"\n", offset)
        header = blobs[offset:header_end].split()
        if header[0].decode() != oid:
            raise RebuildError(f"unexpected object for {path} in {git_dir}")
        if header[1] == b"missing":  # mirrors leave out files of 4 MiB and more
            offset = header_end + 1
            continue
        size = int(header[2])
        start = header_end + 1
        target = into / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(blobs[start:start + size])
        offset = start + size + 1
        written += 1
    return written


def export_from_github(pin: RepoPin, into: Path, url_template: str) -> int:
    """Clones without blobs, checks out only the kept files of the commit, and copies them."""
    with tempfile.TemporaryDirectory(prefix="corpus-clone-") as tmp:
        work = Path(tmp) / "clone"
        url = url_template.format(repo=pin.repo)
        steps = [
            ["git", "clone", "--quiet", "--filter=blob:none", "--no-checkout", url, str(work)],
            ["git", "-C", str(work), "sparse-checkout", "set", "--no-cone", *KEPT, *(f"**/{p}" for p in KEPT)],
            ["git", "-C", str(work), "-c", "advice.detachedHead=false", "checkout", "--quiet", pin.commit],
        ]
        for step in steps:
            done = subprocess.run(step, capture_output=True)
            if done.returncode != 0:
                message = done.stderr.decode(errors="replace").strip().splitlines()
                raise RebuildError(message[-1] if message else f"{' '.join(step[:3])} failed")
        return export_from_git(work / ".git", pin.commit, into)


def rebuild_one(pin: RepoPin, dest: Path, mirrors: Path, url_template: str) -> str:
    """Brings one repository into DEST/owner__name at its commit; returns what was done."""
    final = dest / pin.folder
    stamp = final / STAMP
    if stamp.is_file() and stamp.read_text().strip() == pin.commit:
        (final / CHECKOUT_MARKER).mkdir(exist_ok=True)
        return "up to date"
    dest.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{pin.folder}.", dir=dest))
    try:
        mirror = mirror_of(pin, mirrors)
        count = (export_from_git(mirror, pin.commit, staging) if mirror is not None
                 else export_from_github(pin, staging, url_template))
        (staging / STAMP).write_text(pin.commit + "\n")
        (staging / CHECKOUT_MARKER).mkdir()
        if final.exists():
            shutil.rmtree(final)
        staging.rename(final)
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    return f"{count} files from {'the mirror' if mirror is not None else 'a clone'}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--manifest", action="append", type=Path,
                        help="a corpus manifest (repeatable; default: every benchmarks/corpus/*.json)")
    parser.add_argument("--dest", type=Path, default=DEFAULT_DEST, help=f"where the corpus goes ({DEFAULT_DEST})")
    parser.add_argument("--mirrors", type=Path, default=DEFAULT_MIRRORS,
                        help=f"folder of local bare mirrors named owner+name ({DEFAULT_MIRRORS})")
    parser.add_argument("--github-url", default=GITHUB_URL, help="clone URL template for repositories without a mirror")
    args = parser.parse_args(argv)
    try:
        pins = read_pins(args.manifest or default_manifests())
    except (RebuildError, KeyError) as exc:
        print(f"rebuild: {exc}", file=sys.stderr)
        return 2
    failed = 0
    for pin in pins:
        try:
            print(f"{pin.repo}@{pin.commit[:12]}: {rebuild_one(pin, args.dest, args.mirrors, args.github_url)}")
        except (RebuildError, OSError) as exc:
            failed += 1
            print(f"{pin.repo}@{pin.commit[:12]}: cannot rebuild: {exc}", file=sys.stderr)
    print(f"{len(pins) - failed} of {len(pins)} repositories in {args.dest}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
