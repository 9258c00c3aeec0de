"""Declared copies: a program that repeats a function or class of another file says so on the line above it,

    # same as snippets/ddp/train_torchrun.py:setup
    def setup() -> torch.device:

so that it runs when a reader copies it alone, and the reader sees where the original lives. Every declared copy must
be the original's text exactly (decorators included), and the original must exist and be no copy itself. A top-level
function that starts like an implicit original (`def setup() -> torch.device:`) but declares nothing is compared all
the same and reported as undeclared.

    python -m guidekit.copies          # list what is wrong (exit 1 if anything is)
    python -m guidekit.copies --write  # rewrite copies from their originals; declare undeclared ones
"""

from __future__ import annotations

import ast
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from guidekit import ROOT

DECLARATION = re.compile(r"^# same as (?P<path>\S+\.py):(?P<name>\w+)[ \t]*$")
IMPLICIT = {"def setup() -> torch.device:": "snippets/ddp/train_torchrun.py:setup"}  # first line -> original


@dataclass(frozen=True)
class Copy:
    file: str  # repository path of the program holding the copy
    start: int  # 0-based first line of the copied definition (its first decorator)
    end: int  # 0-based line after it
    original: str  # "path:name"
    declared: bool

    def where(self) -> str:
        return f"{self.file}:{self.start + 1}"


def definitions(source: str) -> dict[str, tuple[int, int]]:
    """Top-level functions and classes: name -> 0-based (first line, line after), decorators included."""
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return {
        node.name: (min([node.lineno, *(d.lineno for d in node.decorator_list)]) - 1, node.end_lineno)
        for node in ast.parse(source).body
        if isinstance(node, kinds)
    }


def _programs(root: Path) -> list[Path]:
    return sorted(p for p in (root / "snippets").rglob("*.py") if p.name != "conftest.py")


def find(root: Path = ROOT) -> tuple[list[Copy], list[str]]:
    """Every copy under snippets/ (declared, or undeclared but implicit), and declarations that name no definition."""
    found, problems = [], []
    for path in _programs(root):
        rel, source = path.relative_to(root).as_posix(), path.read_text(encoding="utf-8")
        lines, spans = source.splitlines(), definitions(source)
        starts = {start: end for start, end in spans.values()}
        for i, line in enumerate(lines):
            match = DECLARATION.match(line)
            if not match:
                continue
            if i + 1 not in starts:
                problems.append(f"{rel}:{i + 1}: a '# same as' line must stand right above a top-level def or class")
                continue
            found.append(Copy(rel, i + 1, starts[i + 1], f"{match['path']}:{match['name']}", True))
        declared = {c.start for c in found if c.file == rel}
        for start, end in starts.items():
            original = IMPLICIT.get(lines[start])
            if original and start not in declared and not original.startswith(f"{rel}:"):
                found.append(Copy(rel, start, end, original, False))
    return found, problems


def original_text(target: str, root: Path = ROOT) -> str | None:
    """The text of `path:name`, or None if there is no such file or top-level definition."""
    path, _, name = target.partition(":")
    file = root / path
    if not file.is_file():
        return None
    source = file.read_text(encoding="utf-8")
    span = definitions(source).get(name)
    return None if span is None else "\n".join(source.splitlines()[span[0] : span[1]])


def _text(root: Path, copy: Copy) -> str:
    return "\n".join((root / copy.file).read_text(encoding="utf-8").splitlines()[copy.start : copy.end])


def problems(root: Path = ROOT) -> list[str]:
    """What is wrong: missing originals, copies of copies, copies that differ, copies that do not say they are."""
    copies, found = find(root)
    declared_at = {(c.file, c.start) for c in copies if c.declared}
    for copy in copies:
        want = original_text(copy.original, root)
        path, _, name = copy.original.partition(":")
        if want is None:
            found.append(f"{copy.where()}: copies {copy.original}, which does not exist")
        elif (path, definitions((root / path).read_text(encoding="utf-8"))[name][0]) in declared_at:
            found.append(f"{copy.where()}: copies {copy.original}, itself a copy: name its original")
        elif _text(root, copy) != want:
            found.append(f"{copy.where()}: differs from {copy.original}")
        if not copy.declared:
            found.append(f"{copy.where()}: a copy of {copy.original} without '# same as {copy.original}' above it")
    return found


def rewrite(root: Path = ROOT) -> list[str]:
    """Make every copy its original's text and declare the undeclared ones; return the files changed."""
    copies, _ = find(root)
    changed = []
    for rel in sorted({c.file for c in copies}):
        path = root / rel
        old = path.read_text(encoding="utf-8")
        lines = old.splitlines(keepends=True)
        for copy in sorted((c for c in copies if c.file == rel), key=lambda c: c.start, reverse=True):
            want = original_text(copy.original, root)
            new = [] if want is None else [line + "\n" for line in want.splitlines()]
            lines[copy.start : copy.end] = new or lines[copy.start : copy.end]
            if not copy.declared:
                lines.insert(copy.start, f"# same as {copy.original}\n")
        if "".join(lines) != old:
            path.write_text("".join(lines), encoding="utf-8")
            changed.append(rel)
    return changed


if __name__ == "__main__":
    if "--write" in sys.argv[1:]:
        print("\n".join(f"rewrote {p}" for p in rewrite()) or "every copy already matches its original")
    bad = problems()
    print("\n".join(bad) or "every copy is declared and matches its original")
    sys.exit(1 if bad else 0)
