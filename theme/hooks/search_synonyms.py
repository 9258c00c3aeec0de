"""Words a reader searches for that the pages spell another way: each language's search index carries its synonyms.

The table goes into the index's ``config`` as ``synonyms``: {what a reader types, lower case: what to search}. Material
hands the index's ``config`` to its search worker as it is, and docs/javascripts/search-query.js, which sees that
message on its way, rewrites each query with the table before the worker reads it. One list of alternatives means
"search this instead" (a spelling the pages never use); several mean "search any of these" (the typed word stays).

- Korean index: the glossary's rejected spellings (docs/ko/glossary.md, read by guidekit.glossary) search the term the
  pages use (에포크 -> 에폭, 프로세스그룹 -> 프로세스 그룹, 시간 초과 -> 타임아웃); an English term searches the Korean one
  too (gradient -> gradient or 기울기); an abbreviation searches its Korean term too (TP -> TP or 텐서 병렬화).
- Korean index, the new chapters' words as Koreans type them: a name or abbreviation the pages write in Latin letters,
  typed in Hangul, searches the Latin word (에프에스디피 -> fsdp, 디텐서 -> dtensor, 울리세스 -> ulysses; TRANSLITERATIONS);
  a glossary term of several words typed as one (링어텐션, 메타장치, CPU오프로드, 활성화체크포인팅) searches the term.
- English index: an abbreviation searches its full term too (OOM -> OOM or out of memory).

Other Korean words written together (기울기누적) need no table: search-query.js splits them into the words the index
holds, but only into parts of two syllables or more and only in all-Hangul words; the compact forms above cover the
glossary's terms that it cannot split (링 어텐션, 위치 표, CPU 오프로드).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from mkdocs.plugins import event_priority

from guidekit import glossary

# Abbreviations readers type, with the full term as the glossary's English column writes it (for the Korean index,
# the glossary's Korean term; a term the glossary lacks is searched in English on both).
ABBREVIATIONS = {
    "DP": "data parallelism",
    "TP": "tensor parallelism",
    "PP": "pipeline parallelism",
    "CP": "context parallelism",
    "EP": "expert parallelism",
    "AC": "activation checkpointing",
    "MoE": "mixture of experts",
    "AMP": "mixed precision",
    "LR": "learning rate",
    "PG": "process group",
    "HSDP": "hybrid sharding",
    "OOM": "out of memory",
}
# Names and abbreviations the pages write in Latin letters, as a Korean reader may type them in Hangul, with the words
# to search (as the index splits them: torch.compile is "torch" and "compile"). Terms of the large-model and scaling
# chapters first; a Hangul word that is also an ordinary word (제로, 라마) keeps the typed word as an alternative.
TRANSLITERATIONS = {
    "에프에스디피": "FSDP",
    "에프에스디피2": "FSDP2",
    "에프에스디피투": "FSDP2",
    "지로": "ZeRO",
    "제로": ("제로", "ZeRO"),
    "디텐서": "DTensor",
    "디바이스메시": "DeviceMesh",
    "디바이스 메시": "DeviceMesh",
    "에이치에스디피": "HSDP",
    "디씨피": "DCP",
    "울리세스": "Ulysses",
    "율리시스": "Ulysses",
    "플로트8": "float8",
    "플로트 8": "float8",
    "플롯8": "float8",
    "에프피8": "FP8",
    "엠에프유": "MFU",
    "파워에스지디": "PowerSGD",
    "토치컴파일": "torch compile",
    "토치 컴파일": "torch compile",
    "허깅페이스": "Hugging Face",
    "허깅 페이스": "Hugging Face",
    "세이프텐서": "safetensors",
    "세이프텐서스": "safetensors",
    "토치타이탄": "torchtitan",
    "메가트론": "Megatron",
    "플렉스어텐션": "FlexAttention",
    "플렉스 어텐션": "FlexAttention",
    "플래시어텐션": "FlashAttention",
    "플래시 어텐션": "FlashAttention",
    "올개더": "all gather",
    "올 개더": "all gather",
    "리듀스스캐터": "reduce scatter",
    "리듀스 스캐터": "reduce scatter",
    "올투올": "all to all",
    "엠오이": "MoE",
    "라마": ("라마", "Llama"),
    "디디피": "DDP",
    "토치런": "torchrun",
}
HANGUL = re.compile(r"[\uac00-\ud7a3]")
VERB_ENDING = re.compile(r"(하다|되다|다)$")


def searchable(spelling: str) -> str | None:
    """The form of a Korean term to search: verbs by their stem (해제하다 -> 해제); None for patterns (…, -세요)."""
    if "…" in spelling or spelling.startswith("-"):
        return None
    return VERB_ENDING.sub("", spelling) if len(spelling) > 2 else spelling


def korean_terms(entries: list[glossary.Entry]) -> dict[str, str]:
    """English term (lower case) -> the Korean term the pages use, pairing the two columns where they pair.

    A term qualified by a parenthesis after it names a narrower sense (rank (of a matrix): 계수) and yields to the
    same term written plain (rank: 랭크)."""
    pairs = []
    for entry in entries:
        english = [(t, s.endswith(")")) for s in entry.english for t in glossary.terms(s)]
        korean = [t for s in entry.korean for t in glossary.terms(s)]
        if korean:
            pairs += zip(english, korean) if len(english) == len(korean) else ((e, korean[0]) for e in english)
    found = {}
    for (term, _), preferred in sorted(pairs, key=lambda pair: pair[0][1]):  # plain terms first, in table order
        if (term := term.lower()) not in found and (preferred := searchable(preferred)):
            found[term] = preferred
    return found


def synonyms(lang: str, entries: list[glossary.Entry]) -> dict[str, list[str]]:
    table: dict[str, list[str]] = {}

    def add(typed: str, searched: list[str]):
        typed = " ".join(typed.lower().split())
        if typed not in table and searched and searched != [typed]:
            table[typed] = list(dict.fromkeys(searched))

    if lang != "ko":
        for short, term in ABBREVIATIONS.items():
            add(short, [short.lower(), term])
        return table
    korean = korean_terms(entries)
    for entry in entries:
        # a row may name several concepts (노드, 워커): a rejected spelling searches each of them
        preferred = [p for s in entry.korean for t in glossary.terms(s) if (p := searchable(t))]
        for rejected in entry.rejected if preferred else ():
            if "…" in rejected or (HANGUL.search(rejected) and rejected.endswith("다")):
                continue  # patterns and verbs: the words they stand for are not spellings to search
            add(rejected, preferred if HANGUL.search(rejected) else [rejected.lower(), *preferred])
    for term, preferred in korean.items():
        add(term, [term, preferred])
    for short, term in ABBREVIATIONS.items():
        add(short, [short.lower(), korean.get(term, term)])
    chosen = {t for entry in entries for s in entry.korean for t in glossary.terms(s)}
    for entry in entries:
        # a term of several words typed as one: the term (링어텐션 -> 링 어텐션, 활성화체크포인팅 -> 활성값 체크포인팅)
        preferred = [p for s in entry.korean for t in glossary.terms(s) if (p := searchable(t))]
        spelled = [(t, [t]) for s in entry.korean for t in glossary.terms(s)]
        spelled += [
            (r, preferred) for r in entry.rejected if HANGUL.search(r) and "…" not in r and not r.endswith("다")
        ]
        for spelling, searched in spelled:
            compact = spelling.replace(" ", "")
            if compact != spelling and HANGUL.search(compact) and compact not in chosen and searched:
                add(compact, searched)
    for typed, words in TRANSLITERATIONS.items():
        alternatives = [words] if isinstance(words, str) else list(words)
        searched = []
        for word in alternatives:
            searched.append(word.lower())
            short = next((s for s in ABBREVIATIONS if s.lower() == word.lower()), None)
            if short and korean.get(ABBREVIATIONS[short]):
                searched.append(korean[ABBREVIATIONS[short]])  # HSDP: also 하이브리드 샤딩
        add(typed, searched)
        if " " in typed:
            add(typed.replace(" ", ""), searched)
    return table


@event_priority(-300)  # after search_per_language (-200) has written one index per language
def on_post_build(config):
    if config.plugins["i18n"].building:
        return
    entries = glossary.entries(path=Path(config.docs_dir) / "ko" / "glossary.md")
    i18n = config.plugins["i18n"]
    for lang in i18n.build_languages:
        folder = "" if lang == i18n.default_language else lang
        path = Path(config.site_dir) / folder / "search" / "search_index.json"
        index = json.loads(path.read_text(encoding="utf-8"))
        index["config"]["synonyms"] = synonyms(lang, entries)
        text = json.dumps(index, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        path.write_text(text, encoding="utf-8")
