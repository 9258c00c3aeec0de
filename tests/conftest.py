import functools
import http.server
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from shared import once_per_run

from guidekit import ROOT
from guidekit.pages import site_path


def source_date_epoch() -> str:
    """The last commit's time: dates in the output (sitemap) depend on it, not on the clock."""
    git = subprocess.run(["git", "log", "-1", "--format=%ct"], cwd=ROOT, capture_output=True, text=True)
    return git.stdout.strip() or "1767225600"


def _build(site, cwd=ROOT, config="mkdocs.yml"):
    env = {**os.environ, "SOURCE_DATE_EPOCH": source_date_epoch()}
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", config, "--site-dir", str(site)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


SITE_FIXTURES = {"built_site", "build_site", "base_url", "browser"}


def pytest_collection_modifyitems(items):
    """`site`: the test builds the site or drives a browser; `make check` leaves those out (see the Makefile)."""
    for item in items:
        if SITE_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.site)


@pytest.fixture(scope="session", autouse=True)
def programs_temp_folder(tmp_path_factory):
    """Programs the tests start (torchrun, Chromium, Slurm's daemons) write their temp files into this run's folder,
    which pytest removes with old runs, not into /tmp; this process keeps the temp folder it already has."""
    before = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = str(tmp_path_factory.mktemp("tmp"))
    yield
    if before is None:
        del os.environ["TMPDIR"]
    else:
        os.environ["TMPDIR"] = before


@pytest.fixture(scope="session")
def build_site():
    """`build_site(site_dir, cwd=..., config=...)`: a strict build of the site, as a CompletedProcess."""
    return _build


@pytest.fixture(scope="session")
def built_site(tmp_path_factory):
    """The whole site, both languages, built once per run with --strict into a scratch folder."""

    def build(site):
        done = _build(site)
        assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stdout}\n{done.stderr[-6000:]}"

    site, seconds = once_per_run(tmp_path_factory, "site", build)
    print(f"\nsite built in {seconds:.1f} s")
    return site


# Debian's headless shell: the same Blink and V8 as its chromium, without the browser UI; Playwright too runs headless
# tests on a headless shell (https://playwright.dev/docs/browsers#chromium-headless-shell); it costs the browser tests
# less CPU than the full chromium in its new headless mode (tests/MEASUREMENTS.md).
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium-headless-shell")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="module")
def base_url(built_site, tmp_path_factory):
    """The built site served on 127.0.0.1 under the same path as when published."""
    root = tmp_path_factory.mktemp("web")
    mount = root / site_path().lstrip("/") if site_path() else root / "site"
    mount.parent.mkdir(parents=True, exist_ok=True)
    mount.symlink_to(built_site, target_is_directory=True)
    handler = functools.partial(QuietHandler, directory=str(root if site_path() else mount))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}{site_path()}"
    server.shutdown()


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).exists():
        if os.environ.get("CI"):
            pytest.fail(
                f"CI must run the browser tests, but {CHROMIUM} is missing (apt-get install chromium-headless-shell)"
            )
        pytest.skip(f"no Chromium at {CHROMIUM}: apt-get install chromium-headless-shell (or set CHROMIUM=...)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()
