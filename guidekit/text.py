"""The site's words: one catalogue per language, ``theme/text/<lang>.yml``, with the same keys in each.

Every Korean and English string the build writes outside the pages themselves (the hooks' blocks and notes, the
chapter notebooks, the performance report) is read from here, so a translator edits ``docs/<lang>/``, the catalogue
and ``mkdocs.yml``'s ``nav_translations``, and no Python. A value is a ``str.format`` template: the code fills in
the names in braces.
"""

from __future__ import annotations

import functools
from pathlib import Path

import yaml

from guidekit import ROOT

FOLDER = Path("theme") / "text"


def catalogue_path(lang: str, root: Path = ROOT) -> Path:
    return root / FOLDER / f"{lang}.yml"


def text(lang: str, root: Path = ROOT) -> dict:
    """The catalogue of `lang`: nested mappings of strings (and a few lists of strings)."""
    path = catalogue_path(lang, root)
    return _read(path, path.stat().st_mtime_ns)  # read again once edited (a running `mkdocs serve`)


@functools.cache
def _read(path: Path, mtime_ns: int) -> dict:
    return yaml.safe_load(path.read_text(encoding="utf-8"))
