"""Search as readers use it: type into the real search box, read the real result list (Korean and English).

What the site adds to Material's search (docs/javascripts/search-query.js, theme/hooks/search_synonyms.py): Korean
particles are set aside, Korean words written together (기울기누적) are split into the words the index holds, the
glossary's rejected spellings search the term the pages use, and abbreviations search their full term too.
"""

import importlib.util
import json

import pytest
from searchbox import run_query, search_pages

from guidekit import ROOT, glossary
from guidekit.pages import LANGS, site_path, url_path

# (query, page expected among the top 3). Korean pages chosen where the Korean text is about the word, on pages that
# have long used it.
KOREAN = [
    ("기울기", "training-loop.md"),  # single words: "no_sync로 기울기 누적하기"
    ("재현성", "practices/reproducibility.md"),
    ("파이프라인", "parallelism.md"),  # "파이프라인 병렬화"
    ("타임아웃", "debugging.md"),  # "타임아웃: 멈춤을 실패로 바꾸기"
    ("기울기 누적", "training-loop.md"),  # multi-word
    ("혼합 정밀도", "practices/mixed-precision.md"),
    ("기울기를", "training-loop.md"),  # particle attached: searched as "기울기"
    ("파이프라인을", "parallelism.md"),  # particle forms the pages never use: the noun is searched
    ("타임아웃으로", "debugging.md"),
    ("랑데", "torchrun.md"),  # partial: "랑데부" (체크포 finds the new checkpoint chapters first since they came)
    ("DDP 체크포인트", "training-loop.md"),  # mixed scripts
    # two nouns written together, as Korean often writes a term: the pages space them
    ("기울기누적", "training-loop.md"),
    ("기울기누적을", "training-loop.md"),  # ... with a particle
    ("기울기누", "training-loop.md"),  # ... still being typed
    ("데이터병렬화", "parallelism.md"),
    ("파이프라인병렬화", "parallelism.md"),
    ("체크포인트저장", "training-loop.md"),
    ("혼합정밀도", "practices/mixed-precision.md"),  # also a rejected spelling (glossary)
    ("그래디언트누적", "training-loop.md"),  # rejected spelling inside a compound: 기울기 누적
    # the glossary's rejected spellings find the term the pages use
    ("에포크", "training-loop.md"),
    ("에포크마다", "training-loop.md"),
    ("시간 초과", "debugging.md"),
    ("내결함성", "fault-tolerance.md"),
    # English terms and abbreviations find the Korean pages
    ("hang", "debugging.md"),
    ("mixed precision", "practices/mixed-precision.md"),
    ("OOM", "errors.md"),
    ("TP", "parallelism.md"),
    ("PP", "parallelism.md"),
    ("AMP", "practices/mixed-precision.md"),
    ("NCCL", "gpu-box.md"),
    ("NCCL로", "gpu-box.md"),  # a particle after Latin letters
]
ENGLISH = [
    ("timeout", "debugging.md"),
    ("reproducibility", "practices/reproducibility.md"),
    ("pipeline", "parallelism.md"),
    ("gradient accumulation", "training-loop.md"),
    ("rendezv", "torchrun.md"),
    ("DDP checkpoint", "training-loop.md"),
    ("TP", "parallelism.md"),
    ("PP", "parallelism.md"),
    ("AMP", "practices/mixed-precision.md"),
    ("NCCL", "gpu-box.md"),
]
# (lang, abbreviation, the full term): the page the full term finds first is among the abbreviation's top 3
ABBREVIATIONS = [
    ("ko", "DP", "데이터 병렬화"),
    ("ko", "CP", "컨텍스트 병렬화"),
    ("ko", "EP", "전문가 병렬화"),
    ("ko", "AC", "활성값 체크포인팅"),
    ("ko", "MoE", "전문가 혼합"),
    ("ko", "LR", "학습률"),
    ("en", "DP", "data parallelism"),
    ("en", "CP", "context parallelism"),
    ("en", "EP", "expert parallelism"),
    ("en", "AC", "activation checkpointing"),
    ("en", "MoE", "mixture of experts"),
    ("en", "LR", "learning rate"),
    ("en", "OOM", "out of memory"),
    ("ko", "OOM", "out of memory"),
]
# (rejected spelling, the glossary's term): the same results, in the same order
SAME_AS = [
    ("그래디언트", "기울기"),
    ("매개변수", "파라미터"),
    ("에포크", "에폭"),
    ("스냅숏", "스냅샷"),
    ("디바이스", "장치"),
]
# (compound, a long-standing page that writes its words apart)
COMPOUNDS = [("활성값체크포인팅", "large-models/memory.md"), ("프로세스그룹", "ddp.md"), ("분산학습", "glossary.md")]
# The large-model and scaling chapters as Koreans type their terms (issue 42): (query, the page that teaches the term),
# expected among the first five, not only the glossary row
NEW_CHAPTERS = {
    "compound": [  # a term of several words typed as one
        (
            "링어텐션",
            "scaling/context-parallel.md",
        ),  # a one-syllable part the splitting cannot find: the glossary's term
        ("메타장치", "large-models/loading.md"),
        ("CPU오프로드", "large-models/zero.md"),  # Latin and Hangul together
        ("2차원메시", "large-models/meshes.md"),  # digits kept with the Hangul
        ("비동기체크포인트", "scaling/async-checkpoint.md"),
        ("전문가병렬화", "scaling/experts.md"),
        ("시퀀스패킹", "scaling/data-state.md"),
        ("기울기압축", "scaling/compression.md"),
        ("그래프브레이크", "scaling/compile.md"),
        ("선택적체크포인팅", "large-models/memory.md"),
        ("파이프라인스케줄", "scaling/pipeline-schedules.md"),
    ],
    "transliteration": [  # a name or an abbreviation the pages write in Latin letters, typed in Hangul
        ("에프에스디피", "parallelism.md"),
        ("지로", "large-models/zero.md"),
        ("디텐서", "large-models/dtensor.md"),
        ("울리세스", "scaling/context-parallel.md"),
        ("플로트8", "scaling/float8.md"),
        ("엠에프유", "scaling/throughput.md"),
        ("허깅페이스", "large-models/hf-checkpoints.md"),
        ("파워에스지디", "scaling/compression.md"),
        ("토치컴파일", "scaling/compile.md"),
        ("에이치에스디피", "large-models/meshes.md"),
    ],
    "rejected": [  # a spelling the glossary rejects, spaced or not
        ("활성화 체크포인팅", "large-models/memory.md"),
        ("활성화체크포인팅", "large-models/memory.md"),
        ("메타 디바이스", "large-models/loading.md"),
        ("페이크 프로세스 그룹", "large-models/meshes.md"),
        ("그래프 중단", "scaling/compile.md"),
        ("로드 밸런싱 손실", "scaling/experts.md"),
        ("문맥병렬화", "scaling/context-parallel.md"),
        ("오프로딩", "large-models/zero.md"),
        ("퓨즈드", "scaling/compile.md"),
        ("할당기", "large-models/memory.md"),
    ],
}


@pytest.fixture(scope="module")
def search_page(browser, base_url):
    """One page per language with the search open, reused between queries."""
    context, open_search = search_pages(browser, base_url)
    yield open_search
    context.close()


def search(page, query):
    """Type the query as a reader does and return the result pages, best first."""
    return list(dict.fromkeys(links[0].split("#")[0] for links in run_query(page, query) if links))


def page_path(lang, name):
    return f"{site_path()}/{url_path(lang, name)}"


@pytest.mark.browser
@pytest.mark.parametrize("lang", LANGS)
def test_typed_query_finds_the_page(search_page, lang):
    """Every query of the language typed into the same page, one after the other; all misses reported at once."""
    page = search_page(lang)
    wrong = []
    for query, expected in {"ko": KOREAN, "en": ENGLISH}[lang]:
        top = search(page, query)[:3]
        if page_path(lang, expected) not in top:
            wrong.append(f"{query!r}: top 3 {top}, expected {page_path(lang, expected)}")
    assert not wrong, f"on the {lang} site:\n" + "\n".join(wrong)


@pytest.mark.browser
def test_abbreviation_finds_the_full_terms_pages(search_page):
    wrong = []
    for lang, short, term in ABBREVIATIONS:
        page = search_page(lang)
        first = search(page, term)[:1]
        top = search(page, short)[:3]
        if not first or first[0] not in top:
            wrong.append(f"{lang} {short!r}: top 3 {top}, but {term!r} finds {first} first")
    assert not wrong, "\n".join(wrong)


@pytest.mark.browser
def test_rejected_spelling_finds_what_the_term_finds(search_page):
    page = search_page("ko")
    wrong = []
    for rejected, term in SAME_AS:
        found, expected = search(page, rejected), search(page, term)
        if not expected or found != expected:
            wrong.append(f"{rejected!r} finds {found[:4]}, {term!r} finds {expected[:4]}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.browser
def test_compound_finds_the_page_that_spaces_it(search_page):
    """A compound the review found nothing for finds pages that write its words apart: the glossary's own pages
    among its first five (other chapters may write the term more often)."""
    page = search_page("ko")
    wrong = []
    for compound, expected in COMPOUNDS:
        top = search(page, compound)[:5]
        if page_path("ko", expected) not in top:
            wrong.append(f"{compound!r}: top 5 {top}, expected {page_path('ko', expected)}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.browser
@pytest.mark.parametrize("kind", sorted(NEW_CHAPTERS))
def test_new_chapters_as_koreans_type_them(search_page, kind):
    """A compound, a Hangul transliteration of a name, or a rejected spelling of a term of the large-model and scaling
    chapters finds the page that teaches the term among its first five."""
    page = search_page("ko")
    wrong = []
    for query, expected in NEW_CHAPTERS[kind]:
        top = search(page, query)[:5]
        if page_path("ko", expected) not in top:
            wrong.append(f"{query!r}: top 5 {top}, expected {page_path('ko', expected)}")
    assert not wrong, f"{kind}:\n" + "\n".join(wrong)


def test_new_chapters_synonyms():
    """The table behind those searches (theme/hooks/search_synonyms.py), without a build: transliterations search the
    Latin word, compact forms of the glossary's terms search the spaced term."""
    table = synonyms_hook().synonyms("ko", glossary.entries())
    assert table["에프에스디피"] == ["fsdp"] and table["디텐서"] == ["dtensor"]
    assert table["에이치에스디피"] == ["hsdp", "하이브리드 샤딩"]  # an abbreviation with a glossary term: both
    assert table["제로"] == ["제로", "zero"]  # an ordinary word too: the typed word stays
    assert table["토치컴파일"] == table["토치 컴파일"] == ["torch compile"]  # the words the index splits it into
    assert table["링어텐션"] == ["링 어텐션"] and table["위치표"] == ["위치 표"]
    assert table["cpu오프로드"] == ["CPU 오프로드"]
    assert table["활성화체크포인팅"] == table["활성화 체크포인팅"] == ["활성값 체크포인팅"]
    assert "출력층" not in table and "체크포인트" not in table  # a term written as one word needs no synonym
    assert "에프에스디피" not in synonyms_hook().synonyms("en", glossary.entries())


def synonyms_hook():
    spec = importlib.util.spec_from_file_location("search_synonyms", ROOT / "theme" / "hooks" / "search_synonyms.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.browser
@pytest.mark.parametrize("lang", LANGS)
def test_numbers_are_searched(search_page, lang):
    """Every search also asks lunr for titles that start with its words (Material's suggestions); lunr 2.3.9 could
    list words its index lacks for "0" and failed the whole search (docs/javascripts/search-query.js)."""
    page = search_page(lang)
    for query in ("0", "rank 0", "127.0.0.1"):
        assert search(page, query), f"{query!r} found nothing on the {lang} site"


@pytest.mark.browser
@pytest.mark.parametrize("lang", LANGS)
def test_results_stay_in_the_readers_language(search_page, lang):
    """A page loads its own language's index (theme/hooks/search_per_language.py), so words both languages use
    find the pages of the language being read and no others."""
    page = search_page(lang)
    home = page_path(lang, "index.md")
    loaded = page.evaluate("performance.getEntriesByType('resource').map(e => new URL(e.name).pathname)")
    assert [p for p in loaded if p.endswith("search_index.json")] == [f"{home}search/search_index.json"], loaded
    others = [page_path(other, "index.md") for other in LANGS if other != lang]
    for query in ("torchrun", "DDP", "NCCL"):
        found = search(page, query)
        assert found, f"{query!r} found nothing on the {lang} site"
        wrong = [
            p for p in found if not p.startswith(home) or any(p.startswith(o) and len(o) > len(home) for o in others)
        ]
        assert not wrong, f"{query!r} on the {lang} site found pages of another language: {wrong}"


def test_synonyms_follow_the_glossary(built_site):
    """theme/hooks/search_synonyms.py: each rejected Korean spelling of the glossary searches a term the glossary
    chose, never itself; the English index holds the abbreviations only."""
    indexes = {
        lang: json.loads((built_site / url_path(lang, "index.md") / "search" / "search_index.json").read_text("utf-8"))
        for lang in LANGS
    }
    korean = indexes["ko"]["config"]["synonyms"]
    chosen = {term for entry in glossary.entries() for spelling in entry.korean for term in glossary.terms(spelling)}
    for entry in glossary.entries():
        for rejected in entry.rejected:
            if "…" in rejected or rejected.endswith("다") or not entry.korean[0][:1].isalpha():
                continue  # patterns and verbs; the style row (-세요)
            searched = korean.get(rejected.lower())
            assert searched, f"the glossary rejects {rejected!r}, but searching it does not search the chosen term"
            assert rejected.lower() not in searched or searched[0] == rejected.lower(), (rejected, searched)
            # a glossary term, or the start of one (a verb by its stem: 건너뛰다 -> 건너뛰)
            known = [s for s in searched if any(term.startswith(s) for term in chosen)]
            assert known, f"{rejected!r} searches {searched}, none a glossary term"
    for short in ("dp", "tp", "pp", "cp", "ep", "ac", "moe", "amp", "lr", "hsdp"):  # the glossary's Korean term
        assert korean[short][0] == short and korean[short][1] in chosen, (short, korean.get(short))
    english = indexes["en"]["config"]["synonyms"]
    assert {"oom", "tp", "moe"} <= english.keys() and not any(ord(c) > 0x3000 for k in english for c in k), english
