"""The glossary's table (``docs/ko/glossary.md``, section ``#terms``): one row per concept, read here and nowhere else.

Columns, found by their headers: the English term, the Korean spellings the site uses (the first is the one to use),
the spellings no Korean page may use ("rejected"), and a note. A cell holds several spellings separated by commas
(commas inside parentheses do not separate: ``storage (disk, file system)``); inline code in a cell is a name, not a
spelling, and is dropped; an empty cell or a dash holds none.

A spelling may stand for several terms (`terms`): ``data / tensor / pipeline / model parallelism`` is four, and
a parenthesis says what the term is about (``(training) step``, ``collective (communication)``).

Readers: the search synonyms (theme/hooks/search_synonyms.py); tests/site/test_terminology.py (the rejected spellings
appear in no Korean text) still reads the table with a parser of its own, which gives the same rows.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from guidekit.pages import DOCS

GLOSSARY = DOCS / "ko" / "glossary.md"
ENGLISH_HEADER = "English"
KOREAN_HEADER = "한국어"
REJECTED_HEADER = "쓰지 않는 표기"
NOTE_HEADER = "비고"
INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")
PARENTHESIS = re.compile(r"\s*\([^()]*\)\s*")
LEADING_PARENTHESIS = re.compile(r"^\(([^()]*)\)\s*")


@dataclass(frozen=True)
class Entry:
    """One row of the table."""

    english: tuple[str, ...]
    korean: tuple[str, ...]  # the spellings the glossary chose for the concept, the one to use first
    rejected: tuple[str, ...]  # spellings no Korean page may use
    note: str


def cells(row: str) -> list[str]:
    return [cell.strip() for cell in row.strip().strip("|").split("|")]


def spellings(cell: str) -> tuple[str, ...]:
    """The spellings in one cell: split at commas outside parentheses, inline code and dashes dropped."""
    found, depth, start = [], 0, 0
    cell = INLINE_CODE.sub("", cell)
    for i, char in enumerate(cell + ","):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth <= 0:
            found.append(cell[start:i].strip())
            start = i + 1
    return tuple(s for s in found if s and s not in {"—", "-"})


def entries(text: str | None = None, path: Path = GLOSSARY) -> list[Entry]:
    """Every row of the table: the first table whose header names the rejected column."""
    lines = (path.read_text(encoding="utf-8") if text is None else text).splitlines()
    header = next((i for i, line in enumerate(lines) if line.startswith("|") and REJECTED_HEADER in line), None)
    if header is None:
        raise ValueError(f"{path} has no table with a '{REJECTED_HEADER}' column")
    columns = cells(lines[header])

    def column(name: str) -> int:
        found = [i for i, c in enumerate(columns) if name in c]
        if not found:
            raise ValueError(f"{path}: the glossary table has no '{name}' column: {columns}")
        return found[0]

    english, korean, rejected, note = (column(h) for h in (ENGLISH_HEADER, KOREAN_HEADER, REJECTED_HEADER, NOTE_HEADER))
    found = []
    for line in lines[header + 2 :]:
        if not line.startswith("|"):
            break
        row = cells(line) + [""] * len(columns)
        found.append(Entry(spellings(row[english]), spellings(row[korean]), spellings(row[rejected]), row[note]))
    return found


def terms(spelling: str) -> list[str]:
    """The terms one spelling stands for, without the parentheses that qualify them.

    ``data / tensor / pipeline / model parallelism`` -> data parallelism, tensor parallelism, ...;
    ``데이터 / 텐서 / 파이프라인 / 모델 병렬화`` -> 데이터 병렬화, ...; ``query / key / value`` -> query, key, value;
    ``(training) step`` -> step, training step; ``collective (communication)`` -> collective.
    """
    found = []
    leading = LEADING_PARENTHESIS.match(spelling)
    for form in [spelling, f"{leading[1]} {spelling[leading.end() :]}"] if leading else [spelling]:
        form = " ".join(PARENTHESIS.sub(" ", form).split())
        parts = [p.strip() for p in form.split(" / ")]
        first, last = parts[0].split(), parts[-1].split()
        shared = last[len(first) :] if len(parts) > 1 else []  # "parallelism" of "data / ... / model parallelism"
        for part in parts:
            words = part.split()
            found.append(" ".join(words + shared if shared and words[-len(shared) :] != shared else words))
    return [t for t in dict.fromkeys(found) if t]
