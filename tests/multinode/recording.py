"""What the multi-node tests' programs printed, as the pages show it: recorded/<name>.txt.

A page includes a recording (`--8<-- "tests/multinode/recorded/<name>.txt"`); the test that made it compares
every later run with it, so a page never shows output its command no longer prints. `RECORD_OUTPUT=1` writes
the recordings anew. Parts that differ from run to run (a port, a duration) are masked with "…" first.
"""

import os
import re

from guidekit import ROOT
from guidekit.outputs import MULTINODE

RECORDED = ROOT / MULTINODE


def matches_recording(name: str, lines: list[str], varies: str | None = None) -> None:
    """`lines`, each match of the regex `varies` masked, equal recorded/<name>.txt (RECORD_OUTPUT=1 writes it)."""
    text = "".join((re.sub(varies, "…", line) if varies else line) + "\n" for line in lines)
    path = RECORDED / f"{name}.txt"
    if os.environ.get("RECORD_OUTPUT") == "1":
        path.write_text(text, encoding="utf-8")
    assert path.is_file(), f"{path} is missing: RECORD_OUTPUT=1 records it"
    assert text == path.read_text(encoding="utf-8"), f"the output is not {path} any more:\n{text}"
