"""How a page names code, and how a snippet marks the parts a page can name.

A page includes a whole file or one named section: ``--8<-- "snippets/x/y.py"`` or
``--8<-- "snippets/x/y.py:name"`` (pymdownx.snippets). A snippet marks a section with comment lines
``# --8<-- [start:name]`` and ``# --8<-- [end:name]``. What lands on the page is the code between the markers,
with every marker line dropped and the common indentation removed (``dedent_subsections: true``).
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

from guidekit import ROOT

INCLUDE_LINE = re.compile(r'^[ \t]*--8<--[ \t]+"(?P<target>[^"]+)"[ \t]*$')
SECTION_MARKER = re.compile(r"^[ \t]*#[ \t]*--8<--[ \t]*\[(?P<edge>start|end):(?P<name>[\w\-]+)\][ \t]*$")


@dataclass(frozen=True)
class Target:
    """What an include names: a file, and optionally one section of it."""

    path: str
    section: str | None = None

    def __str__(self) -> str:
        return f"{self.path}:{self.section}" if self.section else self.path


def parse_target(target: str) -> Target:
    path, _, section = target.partition(":")
    return Target(path, section or None)


def include_line(target: str | Target) -> str:
    """The line a page writes to include `target`."""
    return f'--8<-- "{target}"'


def include_target(line: str) -> Target | None:
    """The target of an include line, or None if the line is not one."""
    match = INCLUDE_LINE.match(line)
    return parse_target(match["target"]) if match else None


def marker(edge: str, name: str) -> str:
    return f"# --8<-- [{edge}:{name}]"


def section_names(source: str) -> list[str]:
    """Names of the sections a snippet marks, in order of their start markers."""
    return [m["name"] for line in source.splitlines() if (m := SECTION_MARKER.match(line)) and m["edge"] == "start"]


def section_span(lines: list[str], name: str) -> tuple[int, int]:
    """Indexes of the start and end marker lines of section `name`; ValueError if it is not marked."""
    starts = [
        i
        for i, line in enumerate(lines)
        if (m := SECTION_MARKER.match(line)) and m.group(2) == name and m[1] == "start"
    ]
    if not starts:
        raise ValueError(f"no '{marker('start', name)}' marker")
    start = starts[0]
    for i in range(start + 1, len(lines)):
        m = SECTION_MARKER.match(lines[i])
        if m and m["name"] == name and m["edge"] == "end":
            return start, i
    raise ValueError(f"no '{marker('end', name)}' marker after its start")


def shown_text(source: str, section: str | None = None) -> str:
    """What an include of `source` (or of one section of it) puts on a page."""
    lines = source.splitlines()
    if section:
        start, end = section_span(lines, section)
        lines = lines[start + 1 : end]
    kept = [line for line in lines if not SECTION_MARKER.match(line)]
    return textwrap.dedent("\n".join(kept)).strip("\n") + "\n"


def target_text(target: str | Target, root: Path = ROOT) -> str:
    """What the include `target` puts on a page, read from the repository at `root`."""
    target = parse_target(target) if isinstance(target, str) else target
    return shown_text((root / target.path).read_text(encoding="utf-8"), target.section)


def without_markers(source: str) -> str:
    """A whole file as a reader copies it: every section marker line dropped."""
    return "".join(line for line in source.splitlines(keepends=True) if not SECTION_MARKER.match(line))


def as_written(text: str) -> str:
    """`text` to put in a page's Markdown so that pymdownx.snippets leaves every line as written.

    pymdownx.snippets reads a page before its fences: it would drop section markers and expand includes even in
    code written out in full. A `;` before the notation escapes it (pymdownx removes the `;`), so the page shows the
    file byte for byte, markers included.
    """
    from pymdownx.snippets import SnippetPreprocessor as Snippets  # the site's engine, not the runner's dependency

    out = []
    for line in text.splitlines(keepends=True):
        body = line.rstrip("\r\n")
        if match := Snippets.RE_ALL_SNIPPETS.match(body):
            at = match.end("space")
        elif "8<-" in body and (match := Snippets.RE_SNIPPET_SECTION.match(body)):
            at = match.end("pre")
        else:
            out.append(line)
            continue
        out.append(body[:at] + ";" + line[at:])
    return "".join(out)
