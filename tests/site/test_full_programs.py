"""Every program a page includes is offered whole: the file byte for byte, a download the site serves, one note."""

import html
import re
import subprocess
import time
from pathlib import Path
from urllib.parse import unquote, urljoin

import pytest

from guidekit import ROOT
from guidekit.pages import LANGS, built_path, page_files, page_includes, page_programs, served_path, url_path
from guidekit.sections import parse_target, target_text
from guidekit.spec import free_port, is_snippet, launch_command, launch_env, parse_spec, sibling_files

PAGES = [(lang, name) for lang in LANGS for name in sorted(page_files(lang))]
CODE_BLOCK = re.compile(r'<span class="filename">(?P<title>[^<]*)</span><pre>.*?<code>(?P<code>.*?)</code></pre>', re.S)
FULL_BLOCK = re.compile(r'<details class="example full-program"(?P<attrs>[^>]*)>(?P<body>.*?)</details>', re.S)
DOWNLOAD = re.compile(r'<a download(?:="download")? href="(?P<href>[^"]+)"')
NOTE = re.compile(r'<p class="snippet-note">(.*?)</p>', re.S)


def decoded(code_html: str) -> str:
    """The text a highlighted code block shows (and its copy button copies)."""
    return html.unescape(re.sub(r"<[^>]+>", "", code_html))


def shown_whole(lang: str, name: str, path: str) -> bool:
    """The page includes the whole file, and that include is every byte of it (no section markers to drop)."""
    whole = any(t.path == path and t.section is None for t in map(parse_target, page_includes(lang, name)))
    return whole and target_text(path) == (ROOT / path).read_text(encoding="utf-8")


@pytest.mark.parametrize("lang,name", PAGES)
def test_every_program_is_offered_whole_once(built_site, lang, name):
    page = built_site / built_path(lang, name)
    source = page.read_text(encoding="utf-8")
    blocks = [(m["title"], decoded(m["code"])) for m in CODE_BLOCK.finditer(source)]
    full = {
        decoded(re.search(r"<summary>.*?<code>(.*?)</code>", m["body"], re.S)[1]): m
        for m in FULL_BLOCK.finditer(source)
    }
    downloads = {(page.parent / unquote(m["href"])).resolve() for m in DOWNLOAD.finditer(source)}
    notes = [re.search(r'/blob/main/(snippets/[^"]+)"', note)[1] for note in NOTE.findall(source)]
    programs = page_programs(lang, name)
    for path in programs:
        text = (ROOT / path).read_text(encoding="utf-8")
        assert any(block == (path, text) for block in blocks), f"{path}: no code block holds the file byte for byte"
        if not shown_whole(lang, name, path):
            assert path in full, f"{path}: no full-program block"
            assert "open" not in full[path]["attrs"], f"{path}: the full-program block must start collapsed"
            inside = [(m["title"], decoded(m["code"])) for m in CODE_BLOCK.finditer(full[path]["body"])]
            assert any(block == (path, text) for block in inside), f"{path}: the full-program block lacks the file"
        for needed in [path, *sibling_files(ROOT / path)]:
            served = built_site / served_path(needed)
            assert served.resolve() in downloads, f"{path}: no download link to {served_path(needed)}"
            assert served.read_bytes() == (ROOT / needed).read_bytes(), f"{served_path(needed)} differs from the source"
        assert notes.count(path) == (1 if is_snippet(ROOT / path) else 0), f"{path}: {notes.count(path)} notes"
    assert set(full) <= set(programs) and set(notes) <= set(programs), "a block or note for a program not on the page"
    for path in (p for p in full if is_snippet(ROOT / p)):
        after = rf'<code>{re.escape(path)}</code></summary>.*?</details>\s*<p class="snippet-note">[^\n]*?/blob/main/'
        assert re.search(after + rf'{re.escape(path)}"', source, re.S), f"{path}: the note must follow its block"


# The browser: what the real copy button of a full-program block copies runs as declared.
# One program per kind: a plain `python` launch, and a torchrun launch that imports a helper from its folder.
RUN_IN_BROWSER = [
    ("ko", "security.md", "snippets/security/weights_only.py"),
    ("en", "training-loop.md", "snippets/training/train_loop_check.py"),  # with the template it imports
]


def launch(spec, cwd: Path) -> subprocess.CompletedProcess:
    """The declared launch, as the snippet runner starts it (guidekit.spec): this interpreter, a free port."""
    port = free_port()
    return subprocess.run(
        launch_command(spec, port),
        cwd=cwd,
        env=launch_env(port),
        capture_output=True,
        text=True,
        timeout=spec.timeout_s,
    )


@pytest.mark.browser
@pytest.mark.parametrize("lang,name,path", RUN_IN_BROWSER)
def test_copied_full_program_runs(browser, base_url, tmp_path, lang, name, path):
    context = browser.new_context(service_workers="block", permissions=["clipboard-read", "clipboard-write"])
    try:
        page = context.new_page()
        page.goto(f"{base_url}/{url_path(lang, name)}", wait_until="networkidle")
        block = page.locator("details.full-program").filter(has=page.locator("summary code", has_text=path))
        assert block.count() == 1
        block.locator("summary").click()
        block.locator("button.md-code__button[data-md-type=copy]").click()
        copied = page.evaluate("navigator.clipboard.readText()")
        files = {path: copied}
        for needed in sibling_files(ROOT / path):  # fetched through the block's own download links
            href = block.locator(f'a[download][href$="/{needed}"]').get_attribute("href")
            files[needed] = page.request.get(urljoin(page.url, href)).text()
        for rel, text in files.items():
            (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / rel).write_text(text, encoding="utf-8")
    finally:
        context.close()
    # byte for byte but the final newline, which Material's copy button trims
    assert copied == (ROOT / path).read_text(encoding="utf-8").removesuffix("\n"), "the copy button must give the file"
    started = time.monotonic()
    run = launch(parse_spec(tmp_path / path, tmp_path), tmp_path)
    print(f"\n{path}: ran in {time.monotonic() - started:.1f} s")
    assert run.returncode == 0, f"{path} exited {run.returncode}:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
