"""Output on the pages is recorded output: every `text` block includes a recording, and the recordings, the
manifest and the snippets agree (what a recording says is checked against a fresh run by the snippet runner)."""

import pytest

from guidekit import ROOT, outputs
from guidekit.pages import LANGS, fences, pages
from guidekit.sections import target_text
from guidekit.spec import all_snippets, parse_spec

SPECS = {spec.path: spec for spec in map(parse_spec, all_snippets())}
MANIFEST = outputs.read_manifest()
RECORDING_FOLDERS = (outputs.OUTPUTS.as_posix(), outputs.MULTINODE.as_posix())  # what a page's text block includes


def text_blocks(lang):
    for name, path in pages(lang).items():
        for fence in fences(path.read_text(encoding="utf-8")):
            if fence.lang == "text":
                yield name, fence


@pytest.mark.parametrize("lang", LANGS)
def test_every_output_block_is_a_recording(lang):
    typed = [
        f"{name}:{fence.line}"
        for name, fence in text_blocks(lang)
        if not fence.is_include or any(not t.path.startswith(RECORDING_FOLDERS) for t in fence.targets)
    ]
    assert not typed, f"text blocks typed by hand, not included from {RECORDING_FOLDERS}: {typed}"


@pytest.mark.parametrize("lang", LANGS)
def test_every_multinode_recording_is_shown(lang):
    """A recording of the multi-host tests that no page includes is output nobody reads (or a page lost it)."""
    shown = {t.path for _, fence in text_blocks(lang) for t in fence.targets}
    recorded = {p.relative_to(ROOT).as_posix() for p in (ROOT / outputs.MULTINODE).glob("*.txt")}
    assert recorded and not recorded - shown, f"not on any {lang} page: {sorted(recorded - shown)}"


@pytest.mark.parametrize("lang", LANGS)
def test_included_excerpts_exist(lang):
    for name, fence in text_blocks(lang):
        for target in fence.targets:
            assert target_text(target).strip(), f"{name}:{fence.line}: {target} shows nothing"


def test_each_recording_belongs_to_a_snippet_that_ran():
    for recording in outputs.recordings():
        snippet = outputs.snippet_of(recording)
        platform = recording.relative_to(ROOT / outputs.OUTPUTS).parts[0]
        assert snippet in SPECS, f"{recording.relative_to(ROOT)}: no snippet {snippet}"
        assert MANIFEST[platform].get(snippet, {}).get("outcome") == "passed", f"{snippet}: not in the manifest"


def test_every_snippet_has_a_cpu_recording_or_a_reason():
    """CI runs on CPU: each snippet either passed there (and has its recording) or was skipped with its reason."""
    for path, spec in SPECS.items():
        entry = MANIFEST["cpu"].get(path)
        assert entry, f"{path}: missing from the manifest (make outputs)"
        if entry["outcome"] == "passed":
            assert outputs.recording_path(path, "cpu").is_file(), f"{path}: no recording"
        else:
            assert spec.gpus and "CUDA GPU" in entry["reason"], f"{path}: {entry}"


def test_the_header_shown_comes_from_the_recording_run():
    header = outputs.header_path("cpu").read_text(encoding="utf-8")
    versions = {entry["torch"] for entry in MANIFEST["cpu"].values()}
    assert len(versions) == 1 and header.split()[1].split("+")[0] == versions.pop(), header.splitlines()[0]
