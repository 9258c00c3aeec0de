"""Which code blocks of a page show a program, and where the page offers each program once (not a hook: the passes
of program_blocks.py share it).

A program block is a fenced Python block whose body is only ``--8<--`` includes of one ``.py`` file. A program is
offered after the include that shows the last of its sections new to the page (later includes only repeat a part for
comparison), below the block's annotation list if it has one: Material binds the list to the code block only when
the list follows it directly.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from guidekit.pages import Fence, fences
from guidekit.sections import target_text


def program_blocks(markdown: str, root: Path) -> list[tuple[Fence, str]]:
    """(fence, repository path) of every block that includes one existing program file, in page order."""
    lines = markdown.split("\n")
    found = []
    for fence in fences(markdown):
        paths = {t.path for t in fence.targets}
        if fence.lang not in ("python", "py") or not fence.is_include or len(paths) != 1 or fence.end_line > len(lines):
            continue  # not an include of one snippet
        file = root / paths.pop()
        if file.suffix != ".py" or not file.is_file():
            continue  # a missing file: check_paths reports it
        found.append((fence, file.relative_to(root).as_posix()))
    return found


@dataclass(frozen=True)
class Offer:
    """Where the page offers `path`: right after `pos` (a program block's end, or its annotation list's)."""

    path: str
    pos: int
    indent: str  # the block's indentation, which whatever is offered keeps
    whole: bool  # the include showed every byte of the file


def offers(markdown: str, root: Path) -> list[Offer]:
    """One offer per program the page shows, in page order."""
    found = program_blocks(markdown, root)
    last_new, seen = {}, set()
    for i, (fence, path) in enumerate(found):
        if {str(t) for t in fence.targets} - seen:
            last_new[path] = i
            seen.update(str(t) for t in fence.targets)
    offsets = [0]
    for line in markdown.split("\n"):
        offsets.append(offsets[-1] + len(line) + 1)
    return [
        Offer(
            path,
            annotation_list_end(markdown, offsets[fence.end_line] - 1, fence.indent),
            fence.indent,
            _whole(fence, path, root),
        )
        for i, (fence, path) in enumerate(found)
        if last_new[path] == i
    ]


def insert(markdown: str, parts: list[tuple[Offer, str]]) -> str:
    """`markdown` with each Markdown part after its offer's place, as a paragraph at the block's indentation.

    A part goes right after the place, before what an earlier pass put there.
    """
    out, last = [], 0
    for offer, part in sorted(parts, key=lambda p: p[0].pos):
        out += [markdown[last : offer.pos], f"\n\n{offer.indent}" + part.replace("\n", f"\n{offer.indent}")]
        last = offer.pos
    return "".join(out) + markdown[last:]


def _whole(fence: Fence, path: str, root: Path) -> bool:
    """An include of the whole file put every byte of it on the page (a file without section markers)."""
    whole = any(t.section is None and t.path == path for t in fence.targets)
    return whole and target_text(path, root) == (root / path).read_text(encoding="utf-8")


ANNOTATION_ITEM = re.compile(r"(?P<indent>[ \t]*)\d+\.\s")


def annotation_list_end(markdown: str, pos: int, indent: str) -> int:
    """Where a code block's annotation list (a numbered list right after it) ends; pos if there is none.

    One program has an annotation (``# (1)!``, snippets/fault/restart_resume.py); without it this scan can go.
    """
    lines = markdown[pos:].split("\n")
    i = 1 if lines and lines[0] == "" else 0  # rest of the closing fence's line
    while i < len(lines) and not lines[i].strip():
        i += 1
    item = ANNOTATION_ITEM.match(lines[i]) if i < len(lines) else None
    if not item or item["indent"] != indent:
        return pos
    end = i
    for j in range(i, len(lines)):
        line = lines[j]
        if not line.strip():
            continue
        inside = (ANNOTATION_ITEM.match(line) and ANNOTATION_ITEM.match(line)["indent"] == indent) or (
            line.startswith(indent + "    ")
        )
        if not inside:
            break
        end = j
    return pos + len("\n".join(lines[: end + 1]))
