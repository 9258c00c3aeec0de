"""The error index (``docs/<lang>/errors.md``): one entry per message, each a heading with a fixed id and a mark.

An entry is a level-2 heading that quotes the message, followed by a comment line the page does not show::

    ## `Expected to have finished reduction in the prior iteration` { #unfinished-reduction }
    <!-- error: recorded snippet=snippets/training/unused_params.py text="Expected to have finished reduction" -->

The first word says where the quoted text comes from:

- ``recorded``: the snippet prints it; ``text`` (or ``check``) is in its recording, recordings/cpu/<path>.txt;
- ``asserted``: the snippet provokes the error and asserts on its message; ``text`` (or ``check``) is in its source;
- ``quoted``: not reproduced here (NCCL, a second host, a rare race); ``source`` names where the text comes from.

``text`` is the message as readers paste it (the heading quotes it); ``check``, when the snippet records or asserts
another part of the same message; ``source``, a file of the torch package (``torch/...py``, then ``text`` must be in
it) or a URL. Both language versions of the page carry the same entries.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from guidekit.pages import DOCS, HEADING, HEADING_ID, outside_fences

PAGE = "errors.md"
KINDS = ("recorded", "asserted", "quoted")
MARK = re.compile(r"^<!--\s*error:\s*(?P<body>.*?)\s*-->\s*$")
REPO = "repo:"  # links to this repository's files (guidekit.pages.repo_links)
LINK = re.compile(r"\]\((?P<url>[^)\s]+)\)")


@dataclass(frozen=True)
class Entry:
    id: str
    heading: str  # the heading's text, its attribute list dropped
    kind: str
    text: str
    snippet: str | None = None
    check: str | None = None
    source: str | None = None
    body: str = ""  # the entry's Markdown up to the next heading

    @property
    def reproduced(self) -> bool:
        return self.kind in ("recorded", "asserted")

    @property
    def checked(self) -> str:
        """The part of the message the recording or the snippet holds."""
        return self.check or self.text

    @property
    def links(self) -> list[str]:
        return [m["url"] for m in LINK.finditer(self.body)]


def parse_mark(line: str) -> dict[str, str] | None:
    """The fields of a mark line, or None if the line is not one; ValueError if it is malformed."""
    match = MARK.match(line.strip())
    if not match:
        return None
    words = shlex.split(match["body"])
    if not words or words[0] not in KINDS:
        raise ValueError(f"error mark must start with one of {KINDS}: {line!r}")
    fields = {"kind": words[0]}
    for word in words[1:]:
        key, sep, value = word.partition("=")
        if not sep or key not in ("text", "snippet", "check", "source"):
            raise ValueError(f"unknown field {word!r} in {line!r}")
        fields[key] = value
    if "text" not in fields:
        raise ValueError(f"error mark without text=: {line!r}")
    if fields["kind"] != "quoted" and "snippet" not in fields:
        raise ValueError(f"a {fields['kind']} error names its snippet=: {line!r}")
    if fields["kind"] == "quoted" and "source" not in fields:
        raise ValueError(f"a quoted error names its source=: {line!r}")
    return fields


def entries(text: str) -> list[Entry]:
    """Every marked entry of an error index page, in page order."""
    lines = outside_fences(text)
    found = []
    for i, line in enumerate(lines):
        heading = HEADING.match(line)
        if not heading or len(heading["level"]) != 2:
            continue
        rest = lines[i + 1 :]
        end = next((j for j, later in enumerate(rest) if HEADING.match(later)), len(rest))
        mark = next((parse_mark(later) for later in rest[:end] if later.strip()), None)
        if mark is None:
            continue
        id_match = HEADING_ID.search(heading["text"])
        if not id_match:
            raise ValueError(f"error entry without a fixed id: {line!r}")
        title = heading["text"][: id_match.start()].strip()
        found.append(Entry(id_match["id"], title, body="\n".join(rest[:end]), **mark))
    return found


def page_entries(lang: str) -> list[Entry]:
    return entries((DOCS / lang / PAGE).read_text(encoding="utf-8"))
