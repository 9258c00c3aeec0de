"""Version numbers on the pages come from one place: a page that says "torch X.Y does ..." names a version CI tests
(the floor in pyproject.toml, or the version the recordings were made with, in recordings/manifest.json), or says when
something changed ("since 2.6", "deprecated in 2.14", "2.7부터"). A version between the floor and the newest that CI
no longer runs, stated as the behaviour of today's torch, is what went stale before (pages said 2.13 where the
recordings said 2.14.1)."""

import json
import re

import pytest

from guidekit import ROOT
from guidekit.pages import LANGS, pages

FLOOR = re.search(r'"torch>=([0-9.]+)"', (ROOT / "pyproject.toml").read_text(encoding="utf-8"))[1]
VERSION = re.compile(r"(?:torch|PyTorch|파이토치)\s*v?(2\.\d+)(?:\.\d+)?(?![\d.]*\+)", re.IGNORECASE)
# Words that make a version part of a history ("since 2.6") or a dated observation ("observed on 2.14.1"), not a
# claim about today's torch.
HISTORY = re.compile(
    r"since|from|until|up to|before|after|older|earlier|later|newer|introduced|added|removed|changed|fixed|deprecat"
    r"|moved|renamed|default(?:s|ed)? (?:to|from)|released|observed|checked|measured|reproduced|saw|found"
    r"|관찰|확인|측정|재현|부터|까지|이전|이후|전에는|예전|추가|도입|제거|바뀌|바꾸|고쳐|폐기|옮겨|기본값이 되",
    re.IGNORECASE,
)


def minor(version: str) -> tuple[int, int]:
    return tuple(int(part) for part in version.split(".")[:2])


def versions_checked() -> set[tuple[int, int]]:
    manifest = json.loads((ROOT / "recordings" / "manifest.json").read_text(encoding="utf-8"))
    recorded = {entry["torch"] for runs in manifest.values() for entry in runs.values() if "torch" in entry}
    return {minor(FLOOR), *map(minor, recorded)}


def sentences(text: str):
    """(first line number, sentence) for the prose of a page: paragraphs joined, code fences left out."""
    fence, paragraph, start = False, [], 0
    for number, line in enumerate([*text.splitlines(), ""], 1):
        if line.lstrip().startswith(("```", "~~~")):
            fence = not fence
        if fence or line.lstrip().startswith(("```", "~~~")) or not line.strip():
            for sentence in re.split(r"(?<=[.!?])\s+", " ".join(paragraph)):
                yield start, sentence
            paragraph = []
            continue
        if not paragraph:
            start = number
        paragraph.append(line.strip())


def stale(text: str, ok: set[tuple[int, int]]) -> list[tuple[int, str]]:
    newest = max(ok)
    found = []
    for number, sentence in sentences(text):
        named = {minor(v) for v in re.findall(r"(?<![\d.])(2\.\d+)(?:\.\d+)?(?!\d)", sentence)}
        if named & ok:  # "checked on 2.10, 2.14 and 2.15": a list with a tested version is an observation
            continue
        for match in VERSION.finditer(sentence):
            version = minor(match[1])
            if minor(FLOOR) < version <= newest and version not in ok and not HISTORY.search(sentence):
                found.append((number, match[0]))
    return found


@pytest.mark.parametrize("lang", LANGS)
def test_pages_name_only_tested_versions(lang):
    ok = versions_checked()
    problems = [
        f"docs/{lang}/{name}:{number}: {words!r}"
        for name in pages(lang)
        for number, words in stale((ROOT / "docs" / lang / name).read_text(encoding="utf-8"), ok)
    ]
    versions = ", ".join(".".join(map(str, v)) for v in sorted(ok))
    assert not problems, f"versions CI does not test ({versions}) stated as today's behaviour:\n" + "\n".join(problems)


def test_a_stale_version_is_caught_and_history_is_not():
    ok = {(2, 10), (2, 15)}
    assert stale("On torch 2.13 the store listens on every address.", ok) == [(1, "torch 2.13")]
    assert stale("torch 2.13의 TCPStore는 모든 주소에서 기다립니다.", ok) == [(1, "torch 2.13")]
    assert stale("Deprecated since torch 2.13. On torch 2.15 it warns.", ok) == []
    assert stale("The same on torch 2.14 and 2.15.", ok) == []
    assert stale("PyTorch 2.6부터 기본값입니다.", ok) == []  # before the floor: history
    assert stale("```\ntorch 2.13\n```", ok) == []
