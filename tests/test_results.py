"""The performance page's report (guidekit/report.py): every committed benchmark result renders in both languages."""

import copy

import pytest

from guidekit import report
from guidekit.sections import target_text
from guidekit.text import text

FILES = sorted(p.name for p in report.RESULTS.glob("*.json"))
LANGS = ("ko", "en")
SECTIONS = ["snippets/benchmark/ddp_benchmark.py:timing", "snippets/benchmark/ddp_benchmark.py:model"]


def test_there_are_results():
    assert FILES, f"no result files in {report.RESULTS}"


@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.parametrize("name", FILES)
def test_tables_have_one_row_per_run(name, lang):
    res = report.load(name)
    rows = report.table(name, lang).splitlines()
    assert len(rows) == 2 + len(res["runs"]), "one table row per run"
    assert all(row.count("|") == rows[0].count("|") for row in rows), "ragged table"
    ddp = [r for r in res["runs"] if r["mode"] == "DDP"]
    assert len(report.model_table(name, lang).splitlines()) == 2 + len(ddp)
    assert len(report.allreduce_table(name, lang).splitlines()) == 2 + len(res["allreduce"])
    assert len(report.environment(name, lang).splitlines()) == 2 + 7
    assert len(report.gpu_prediction(name, lang).splitlines()) == 2 + len(report.LINKS)


@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.parametrize("name", FILES)
def test_plot_is_inline_svg_with_text_labels(name, lang):
    svg = report.plot(name, lang)
    assert svg.startswith("<svg") and svg.rstrip().endswith("</svg>")
    assert text(lang)["report"]["plot_scaling"] in svg, "labels stay text (the browser renders Hangul)"


@pytest.mark.parametrize("name", FILES)
def test_facts_and_sentences(name):
    f = report.facts(name)
    assert f["measured_ms"] > 0 and f["predicted_ms"] >= f["compute_ms"] > 0
    assert report.printed(name).strip(), "the table the benchmark printed is missing"
    for lang in LANGS:
        check = report.model_check(name, lang)
        assert f"{f['measured_ms']:.1f} ms" in check and "{" not in check
    assert report.caveats(name, "ko").count("\n") == report.caveats(name, "en").count("\n")


def test_sentences_follow_the_run():
    """Each branch of the measured sentences: load above or within the cores, a prediction off by more than 25%,
    no run with threads."""
    res = report.load(FILES[0])
    quiet = copy.deepcopy(res)
    quiet["env"]["loadavg_start"] = quiet["env"]["loadavg_end"] = 0.5
    off = copy.deepcopy(res)
    for run in off["runs"]:
        if run["mode"] == "DDP":
            run["predicted"]["no_overlap_ms"] = 2 * run["step_ms"]["median"]
    no_threads = copy.deepcopy(res)
    no_threads["runs"] = [r for r in res["runs"] if not (r["mode"] == "single" and r["threads"] > 1)]
    gpu = copy.deepcopy(res)
    gpu["env"]["gpus"] = ["H100"]
    with pytest.MonkeyPatch.context() as patch:
        for lang in LANGS:
            t = text(lang)["report"]
            patch.setattr(report, "load", lambda name: quiet)
            assert t["load_ok"].format(load=0.5, cores=res["env"]["cpus_usable"]) in report.caveats("-", lang)
            patch.setattr(report, "load", lambda name: off)
            assert t["outside"] in report.model_check("-", lang)
            patch.setattr(report, "load", lambda name: no_threads)
            assert report.caveats("-", lang).count("\n- ") == 0
            patch.setattr(report, "load", lambda name: gpu)
            assert report.caveats("-", lang) == ""


@pytest.mark.parametrize("target", SECTIONS)
def test_code_is_shown_as_a_page_include_shows_it(target):
    """The report shows a section through guidekit.sections, the one owner of the marker format."""
    shown = report.source(target)
    assert shown == f"```python\n{target_text(target)}```\n\n`{target.partition(':')[0]}`"
    assert "--8<--" not in shown
