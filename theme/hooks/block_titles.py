"""A program block's title is its file: ```` ```python title="snippets/x/y.py" ```` unless the page gave one (a pass
of program_blocks.py)."""

from __future__ import annotations

from pathlib import Path

from shown_programs import program_blocks


def titled(markdown: str, root: Path) -> str:
    lines = markdown.split("\n")
    for fence, path in program_blocks(markdown, root):
        attrs = fence.info[len(fence.info.split()[0]) :]
        if "title=" not in attrs:
            attrs = f'{attrs} title="{path}"'
        lines[fence.line - 1] = f"{fence.indent}{fence.marker}{fence.lang}{attrs}"
    return "\n".join(lines)
