"""Families of copies among the repositories of a review: those whose code is mostly the same (one Kaggle notebook
or course template copied under many names), so that a review can keep the first few of each and no copied
tutorial fills its sample.

Two repositories are copies when the Jaccard similarity of their sets of code lines (the `.py` files and the
code cells of the notebooks; whitespace removed, comments and lines of 8 characters or fewer left out) is at
least THRESHOLD. A repository joins the family of the first repository, in the manifest's order, that it
copies (a copy of a copy is one of the family). Decided on the code alone, before anything is linted. Prints
each family of more than one, and writes the repositories past the first KEEP of each as JSON. Usage:

    python benchmarks/copy_families.py MANIFEST.json TREE [--keep 2] [--threshold 0.5] [--out drop.json]
"""

from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path

THRESHOLD = 0.5
SHORTEST = 9  # characters of a normalised line that counts (shorter ones, `else:` or `return x`, are everywhere)


def code_text(path: Path) -> str:
    """The code of a `.py` file, or of a notebook's code cells ('' when unreadable)."""
    try:
        text = path.read_text(errors="replace")
        if path.suffix != ".ipynb":
            return text
        cells = json.loads(text).get("cells", [])
    except (OSError, ValueError, AttributeError):
        return ""
    sources = (cell.get("source", "") for cell in cells if isinstance(cell, dict) and cell.get("cell_type") == "code")
    return "\n".join("".join(source) if isinstance(source, list) else str(source) for source in sources)


def code_lines(folder: Path) -> frozenset[str]:
    """The repository's normalised code lines."""
    lines = set()
    for path in folder.rglob("*"):
        if path.suffix in (".py", ".ipynb") and path.is_file():
            for line in code_text(path).splitlines():
                line = "".join(line.split())
                if len(line) >= SHORTEST and not line.startswith("#"):
                    lines.add(line)
    return frozenset(lines)


def families(order: list[str], tree: Path, threshold: float = THRESHOLD) -> list[list[str]]:
    """The repositories (folder names, owner__name) grouped into families of copies, each in manifest order."""
    present = [name for name in order if (tree / name).is_dir()]
    lines = {name: code_lines(tree / name) for name in present}
    head = {name: name for name in present}
    for first, second in itertools.combinations(present, 2):
        a, b = lines[first], lines[second]
        if head[second] == second and a and b and len(a & b) / len(a | b) >= threshold:
            head[second] = head[first]
    grouped: dict[str, list[str]] = {}
    for name in present:
        grouped.setdefault(head[name], []).append(name)
    return list(grouped.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("manifest", type=Path)
    parser.add_argument("tree", type=Path)
    parser.add_argument("--keep", type=int, default=2)
    parser.add_argument("--threshold", type=float, default=THRESHOLD)
    parser.add_argument("--out", type=Path, default=Path("drop.json"))
    args = parser.parse_args()
    order = [entry["repo"].replace("/", "__", 1) for entry in json.loads(args.manifest.read_text())["repos"]]
    found = families(order, args.tree, args.threshold)
    drop = [name for family in found for name in family[args.keep:]]
    for family in found:
        if len(family) > 1:
            print(f"{len(family)} copies: {', '.join(family)}")
    args.out.write_text(json.dumps(drop, indent=1) + "\n")
    print(f"{len(order)} repositories, {sum(len(f) > 1 for f in found)} families of copies, {len(drop)} past the "
          f"first {args.keep} of theirs: {args.out}")


if __name__ == "__main__":
    main()
