"""Standalone copies of one reference function: every program shows a whole `setup()`, so readers can copy any
one of them, and every copy must stay the reference's text exactly.

    python -m guidekit.copies          # list copies that drifted (exit 1 if any)
    python -m guidekit.copies --write  # rewrite them from the reference
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from guidekit import ROOT
from guidekit.spec import all_snippets

REFERENCE = "snippets/ddp/train_torchrun.py"
SIGNATURE = "def setup() -> torch.device:"  # copies are the functions that start like this


def _functions(source: str, first_line: str) -> list[tuple[int, int]]:
    """(start, end) line indexes of top-level functions whose source starts with `first_line`."""
    lines = source.splitlines()
    return [
        (node.lineno - 1, node.end_lineno)
        for node in ast.parse(source).body
        if isinstance(node, ast.FunctionDef) and lines[node.lineno - 1].startswith(first_line)
    ]


def reference_text(root: Path = ROOT) -> str:
    source = (root / REFERENCE).read_text(encoding="utf-8")
    ((start, end),) = _functions(source, SIGNATURE)
    return "\n".join(source.splitlines()[start:end])


def drifted(root: Path = ROOT) -> list[str]:
    """Snippets holding a copy that differs from the reference."""
    want = reference_text(root)
    found = []
    for path in all_snippets(root):
        source = path.read_text(encoding="utf-8")
        lines = source.splitlines()
        if any("\n".join(lines[s:e]) != want for s, e in _functions(source, SIGNATURE)):
            found.append(path.relative_to(root).as_posix())
    return found


def rewrite(root: Path = ROOT) -> list[str]:
    """Replace every drifted copy with the reference text; return the files changed."""
    want = reference_text(root).splitlines()
    changed = drifted(root)
    for rel in changed:
        path = root / rel
        lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
        for start, end in reversed(_functions("".join(lines), SIGNATURE)):
            lines[start:end] = [line + "\n" for line in want]
        path.write_text("".join(lines), encoding="utf-8")
    return changed


if __name__ == "__main__":
    if "--write" in sys.argv[1:]:
        print("\n".join(f"rewrote {p}" for p in rewrite()) or "all copies match the reference")
    else:
        bad = drifted()
        print("\n".join(f"differs from {REFERENCE}: {p}" for p in bad) or "all copies match the reference")
        sys.exit(1 if bad else 0)
