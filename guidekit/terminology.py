"""The terminology checker: the glossary's rejected spellings, found in Korean prose (tests/site/test_terminology.py
runs it over every Korean text the site shows).

The rejected column of docs/ko/glossary.md is the list. A spelling there is matched as written, with four conventions
the glossary's introduction explains:

- a spelling in Latin letters (``abort``, ``Python``) is a whole word: ``CPython`` and ``monitored_barrier`` are not
  ``Python`` and ``barrier``; ``abort하고`` is ``abort``;
- a verb (``배치하다``, ``물러나다``) is matched in every form (배치한, 배치합니다, 배치해, 배치된, 물러납니다 ...);
- ``…`` stands for up to three characters without a space (``누적 …단계`` finds 누적 단계 and 누적 2단계);
- a gloss, a parenthesis right after a word that opens with a Latin letter (``비정상 종료(abort)``,
  ``장애 허용(fault tolerance, 내결함성)``), may hold any spelling: it names the term, it does not use it.

Code (fences, inline code), link targets, heading ids and HTML comments are not prose and are not checked.
`parenthesis_breaks` finds the other slip a source makes in Korean prose: a line break right before "(", which the
page shows as a space.
Besides the Korean pages and notebook cells, the Korean strings the site shows from elsewhere are checked too: the
figures' text, the build's Korean phrases (theme/text/ko.yml) and the calculators' Korean labels; and the
Korean chapter notebooks (notebooks/ko/).
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass

from guidekit import ROOT, glossary
from guidekit.pages import DOCS, fences, notebook_cells, notebooks, pages

GLOSSARY = DOCS / "ko" / "glossary.md"
INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")
LINK_TARGET = re.compile(r"\]\([^)\s]*(?:\s+\"[^\"]*\")?\)")  # [text](target "title"): the text stays
URL = re.compile(r"<?https?://[^\s>)]+>?")
HEADING_ATTRS = re.compile(r"\{\s*[#.][^}]*\}\s*$")
HTML_COMMENT = re.compile(r"<!--.*?-->")
GLOSS = re.compile(r"(?<=\S)\((?=[A-Za-z])[^()]*\)")  # 기울기(gradient), 장애 허용(fault tolerance, 내결함성)
HANGUL = re.compile(r"[\uac00-\ud7a3]")
LATIN_EDGE = "A-Za-z0-9_\\-"  # a Latin spelling is a word: not part of CPython, exit-abort, monitored_barrier
# A verb's forms: its last stem syllable with any final consonant (배치하 → 배치한, 배치합니다), and the contracted
# vowel of 하/되 (배치해, 배치됐)
CONTRACTED = {"하": "해", "되": "돼"}
WILDCARD = "…"

# The Korean strings the site shows that are not in docs/ko pages
FIGURES = sorted((DOCS / "ko" / "assets").glob("*.svg"))
SITE_PHRASES = ROOT / "theme" / "text" / "ko.yml"
CALCULATORS = DOCS / "javascripts" / "calculators.js"
CHAPTER_NOTEBOOKS = sorted((ROOT / "notebooks" / "ko").glob("*.ipynb"))  # the Korean chapter notebooks


@dataclass(frozen=True)
class Rule:
    preferred: tuple[str, ...]  # the spellings the glossary chose for the concept
    rejected: tuple[str, ...]  # spellings no Korean page may use

    @property
    def patterns(self) -> list[tuple[str, re.Pattern]]:
        return [(bad, spelling_pattern(bad)) for bad in self.rejected]


@dataclass(frozen=True)
class Finding:
    line: int
    rejected: str
    preferred: str
    text: str


def _syllables(first: str) -> str:
    """The character class of one Hangul syllable with every final consonant: 하 → [하-핳]."""
    return f"{first}-{chr(ord(first) + 27)}"


@functools.cache
def spelling_pattern(spelling: str) -> re.Pattern:
    """The regular expression one rejected spelling stands for (see the module's docstring)."""
    body, ending = spelling, ""
    last = spelling[-2:-1]
    if len(spelling) > 2 and spelling.endswith("다") and HANGUL.match(last) and (ord(last) - 0xAC00) % 28 == 0:
        body = spelling[:-2]
        ending = "[" + "".join(_syllables(s) for s in (last, CONTRACTED.get(last)) if s) + "]"
    pattern = r"\S{0,3}".join(re.escape(part) for part in body.split(WILDCARD)) + ending
    if re.match(r"[A-Za-z]", spelling):
        pattern = rf"(?<![{LATIN_EDGE}.]){pattern}"  # nor an attribute: dist.barrier
    if re.search(r"[A-Za-z]$", spelling):
        pattern = rf"{pattern}(?![{LATIN_EDGE}(])"  # nor a call: barrier() in a figure
    return re.compile(pattern)


def load_rules(text: str | None = None) -> list[Rule]:
    """The glossary table's rows that reject a spelling (guidekit.glossary reads the table)."""
    return [Rule(e.korean, e.rejected) for e in glossary.entries(text) if e.rejected]


def prose_lines(text: str) -> list[tuple[int, str]]:
    """(1-based line number, text) of every line outside code fences, with code, link targets, URLs, heading ids,
    HTML comments and glosses blanked out."""
    inside = set()
    for fence in fences(text):
        inside.update(range(fence.line - 1, fence.line + len(fence.body) + 1))
    found = []
    for n, line in enumerate(text.splitlines()):
        if n in inside:
            continue
        for pattern in (INLINE_CODE, HTML_COMMENT, LINK_TARGET, URL, HEADING_ATTRS):
            line = pattern.sub(lambda m: "]" if m.group(0).startswith("]") else " ", line)
        found.append((n + 1, GLOSS.sub(" ", line)))
    return found


def check_text(text: str, rules: list[Rule], korean_only: bool = False) -> list[Finding]:
    """Every rejected spelling in the prose of one Markdown text, preferred spellings masked first.

    korean_only: check only the spellings written in Hangul (for bilingual text, where English is English)."""
    found = []
    for number, line in prose_lines(text):
        for rule in rules:
            for bad, pattern in rule.patterns:
                if korean_only and not HANGUL.search(bad):
                    continue
                masked = line  # a preferred spelling may contain the rejected one: 혼합 정밀도, 혼합 정밀
                for good in sorted(rule.preferred, key=len, reverse=True):
                    if good not in bad:  # ... but not the other way round: 시드, 시드하다
                        masked = masked.replace(good, " ")
                if pattern.search(masked):
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


def lines_keeping_numbers(text: str, keep) -> str:
    """The text with every line that `keep` rejects blanked, so that reported line numbers stay right."""
    return "\n".join(keep(line) for line in text.splitlines())


def figure_text(line: str) -> str:
    return " ".join(re.findall(r">([^<>]*)<", line))  # the text between tags: <text>, <tspan>, <title>


def yaml_value(line: str) -> str:
    """A value of theme/text/ko.yml: after the key, or a line of a block value or list; comments are not text."""
    if line.lstrip().startswith("#"):
        return ""
    match = re.match(r"\s*[\w-]+:\s*(.*?)\s*$", line)
    value = match.group(1) if match else line.strip().removeprefix("- ")
    return "" if value in {"|", ">", "|-", ">-"} else value.strip("\"'")


def _js_strings(line: str) -> str:
    return " ".join(m[1:-1] for m in re.findall(r"\"(?:[^\"\\]|\\.)*\"|`[^`]*`|'(?:[^'\\]|\\.)*'", line))


def calculators_ko(text: str) -> str:
    """calculators.js with everything but the strings of its `ko: { ... }` block blanked."""
    out, depth = [], None
    for line in text.splitlines():
        if depth is None and re.match(r"\s*ko:\s*\{\s*$", line):
            depth = 0
        if depth is None:
            out.append("")
            continue
        out.append(_js_strings(line))
        depth += line.count("{") - line.count("}")
        if depth <= 0:
            depth = None
    return "\n".join(out)


def other_korean_texts() -> list[tuple[str, str, bool]]:
    """(name, text, korean_only) for the Korean strings the site shows from outside docs/ko pages."""
    texts = []
    for path in FIGURES:
        texts.append(
            (path.relative_to(ROOT).as_posix(), lines_keeping_numbers(path.read_text("utf-8"), figure_text), False)
        )
    if SITE_PHRASES.exists():
        texts.append(("theme/text/ko.yml", lines_keeping_numbers(SITE_PHRASES.read_text("utf-8"), yaml_value), False))
    if CALCULATORS.exists():
        texts.append(("docs/javascripts/calculators.js (ko)", calculators_ko(CALCULATORS.read_text("utf-8")), False))
    if not CHAPTER_NOTEBOOKS:
        raise FileNotFoundError("no Korean chapter notebooks found in notebooks/ko/")
    for path in CHAPTER_NOTEBOOKS:
        cells = json.loads(path.read_text("utf-8")).get("cells", [])
        for index, cell in enumerate(cells):
            if cell.get("cell_type") == "markdown":
                source = "".join(cell.get("source", []))
                texts.append((f"{path.relative_to(ROOT).as_posix()} (markdown cell {index})", source, False))
    return texts


def parenthesis_breaks(text: str) -> list[Finding]:
    """Lines of prose that end where the next line opens with "(": Markdown joins the two lines with a space, so the
    page shows "재진입 (reentrant)" or "…입니다 ([링크])" where Korean writes the parenthesis right after the word.
    A line that ends a sentence (".", "?", "!", ":") may be followed by one; tables, headings and code are not prose."""
    inside = set()
    for fence in fences(text):
        inside.update(range(fence.line - 1, fence.line + len(fence.body) + 1))
    lines = text.splitlines()
    found = []
    for n, (line, following) in enumerate(zip(lines, lines[1:])):
        if n in inside or n + 1 in inside or not following.lstrip().startswith("("):
            continue
        stripped = line.strip()
        if stripped and not stripped.startswith(("|", "#", "<")) and not stripped.endswith((".", "?", "!", ":")):
            found.append(Finding(n + 1, "⏎(", "no line break before (", f"{stripped[-40:]}⏎{following.strip()[:40]}"))
    return found


def report(name: str, findings: list[Finding]) -> str:
    return "\n".join(f"{name}:{f.line}: '{f.rejected}' (use {f.preferred}): {f.text[:120]}" for f in findings)
