"""Korean pages speak with one voice: the glossary's rejected spellings appear nowhere in their prose."""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest

from guidekit.pages import DOCS, fences, notebook_cells, notebooks, pages

GLOSSARY = DOCS / "ko" / "glossary.md"
REJECTED_HEADER = "쓰지 않는 표기"
PREFERRED_HEADER = "한국어"
INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")


@dataclass(frozen=True)
class Rule:
    preferred: tuple[str, ...]  # the spellings the glossary chose for the concept
    rejected: tuple[str, ...]  # spellings no Korean page may use


@dataclass(frozen=True)
class Finding:
    line: int
    rejected: str
    preferred: str
    text: str


def _cells(row: str) -> list[str]:
    return [cell.strip() for cell in row.strip().strip("|").split("|")]


def _spellings(cell: str) -> tuple[str, ...]:
    cell = INLINE_CODE.sub("", cell)
    return tuple(s.strip() for s in cell.split(",") if s.strip() and s.strip() not in {"—", "-"})


def load_rules(text: str | None = None) -> list[Rule]:
    """The glossary table: the row whose header names the rejected column, and every row below it."""
    lines = (GLOSSARY.read_text(encoding="utf-8") if text is None else text).splitlines()
    header = next((i for i, line in enumerate(lines) if line.startswith("|") and REJECTED_HEADER in line), None)
    assert header is not None, f"{GLOSSARY} has no table with a '{REJECTED_HEADER}' column"
    columns = _cells(lines[header])
    preferred_col = next(i for i, c in enumerate(columns) if c.startswith(PREFERRED_HEADER))
    rejected_col = next(i for i, c in enumerate(columns) if REJECTED_HEADER in c)
    rules = []
    for line in lines[header + 2 :]:
        if not line.startswith("|"):
            break
        cells = _cells(line)
        rejected = _spellings(cells[rejected_col])
        if rejected:
            rules.append(Rule(_spellings(cells[preferred_col]), rejected))
    return rules


def prose_lines(text: str) -> list[tuple[int, str]]:
    """(1-based line number, text) of every line outside code fences, with inline code blanked out."""
    inside = set()
    for fence in fences(text):
        inside.update(range(fence.line - 1, fence.line + len(fence.body) + 1))
    return [(n + 1, INLINE_CODE.sub(" ", line)) for n, line in enumerate(text.splitlines()) if n not in inside]


def check_text(text: str, rules: list[Rule]) -> list[Finding]:
    """Every rejected spelling in the prose of one Markdown text, preferred spellings masked first."""
    found = []
    for number, line in prose_lines(text):
        for rule in rules:
            masked = line
            for good in sorted(rule.preferred, key=len, reverse=True):
                masked = masked.replace(good, " ")
            for bad in rule.rejected:
                if bad in masked:
                    found.append(Finding(number, bad, " / ".join(rule.preferred), line.strip()))
    return found


def korean_texts() -> list[tuple[str, str]]:
    """(name for the report, Markdown text): every Korean page but the glossary, and notebook Markdown cells."""
    texts = [
        (f"docs/ko/{name}", path.read_text(encoding="utf-8")) for name, path in pages("ko").items() if path != GLOSSARY
    ]
    for name, path in notebooks("ko").items():
        for index, (kind, source) in enumerate(notebook_cells(path)):
            if kind == "markdown":
                texts.append((f"docs/ko/{name} (markdown cell {index})", source))
    return texts


def report(name: str, findings: list[Finding]) -> str:
    return "\n".join(f"{name}:{f.line}: '{f.rejected}' (use {f.preferred}): {f.text[:120]}" for f in findings)


def test_glossary_has_rules():
    rules = load_rules()
    assert len(rules) >= 10, "the glossary's rejected column is (nearly) empty"
    assert any("에포크" in r.rejected for r in rules)


@pytest.mark.parametrize("name,text", korean_texts(), ids=lambda v: v if isinstance(v, str) and len(v) < 80 else "")
def test_no_rejected_spelling(name, text):
    findings = check_text(text, load_rules())
    assert not findings, "rejected spellings (see docs/ko/glossary.md):\n" + report(name, findings)


def test_planted_variant_is_caught():
    """A rejected spelling planted in a copy of a real page is found, with its line; code is not checked."""
    rules = load_rules()
    page = (DOCS / "ko" / "ddp.md").read_text(encoding="utf-8")
    assert not check_text(page, rules)
    lines = page.splitlines()
    lines.insert(2, "에포크마다 순서를 바꾸려면 확인하십시오.")
    findings = check_text("\n".join(lines), rules)
    assert {(f.line, f.rejected) for f in findings} == {(3, "에포크"), (3, "십시오")}
    in_code = page + "\n\n```python\n# 에포크\n```\n\n`에포크` 는 코드로만 쓰였습니다.\n"
    assert not check_text(in_code, rules)


def test_preferred_spelling_is_not_flagged():
    """A rejected spelling that is part of the preferred one (혼합정밀도 vs 혼합 정밀도) is not confused with it."""
    rules = [Rule(("혼합 정밀도",), ("혼합 정밀",)), Rule(("키-값 저장소(TCPStore)",), ("TCP 저장소",))]
    assert not check_text("혼합 정밀도(mixed precision)와 키-값 저장소(TCPStore)", rules)
    assert [f.rejected for f in check_text("혼합 정밀 학습과 TCP 저장소", rules)] == ["혼합 정밀", "TCP 저장소"]
