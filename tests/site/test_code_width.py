"""Program lines that fit the code column, checked without a browser: tests/site/test_every_page.py measures the blocks as
Chromium lays them out, and guidekit/code_layout.py says why the line length is 80."""

import re
import unicodedata

from guidekit import ROOT
from guidekit.spec import DECLARATION, HEADER_LINES

# Python 3.10 has no tomllib: the one setting, read with a pattern
RUFF_TOML = (ROOT / "snippets" / "ruff.toml").read_text(encoding="utf-8")
LINE_LENGTH = int(re.search(r"^line-length\s*=\s*(\d+)", RUFF_TOML, re.M)[1])


def columns(line: str) -> int:
    """Columns a line takes as ruff counts them: East Asian wide characters (Hangul) take two."""
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in line)


def test_program_lines_fit_the_code_column():
    """The static half, without a browser: every line of a program fits, but its declarations (`# launch: ...`)."""
    long = []
    for path in sorted((ROOT / "snippets").rglob("*.py")):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            declaration = number <= HEADER_LINES and DECLARATION.match(line)
            if columns(line) > LINE_LENGTH and not declaration:
                long.append(f"{path.relative_to(ROOT)}:{number}: {columns(line)} columns")
    assert not long, f"{len(long)} lines longer than {LINE_LENGTH} (snippets/ruff.toml):\n" + "\n".join(long)
