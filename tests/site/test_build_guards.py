"""The build itself guards the site: a broken page fails it, and the same sources give the same bytes."""

import filecmp
import shutil

import pytest

from guidekit import ROOT

BROKEN_LINKS = """

A [link to a page that does not exist](no-such-page.md) and one to a
[section that does not exist](ddp.md#no-such-section).
"""
BROKEN_INCLUDE = """

```python
--8<-- "snippets/ddp/no_such_file.py"
```
"""


@pytest.mark.parametrize(
    "lang,planted,reported",
    [("en", BROKEN_LINKS, ["no-such-page.md", "no-such-section"]), ("ko", BROKEN_INCLUDE, ["no_such_file.py"])],
    ids=["links", "include"],
)
def test_a_broken_page_fails_the_build(build_site, tmp_path, lang, planted, reported):
    """A scratch copy of the site with one planted fault (an include aborts the build, so one fault a build). The
    include goes into the Korean page, built first: the build stops there, not after the whole Korean site."""
    repo = tmp_path / "repo"
    for name in ("docs", "snippets", "theme", "notebooks", "recordings"):  # what the pages take in
        shutil.copytree(ROOT / name, repo / name, ignore=shutil.ignore_patterns("__pycache__", "results"))
    shutil.copytree(ROOT / "snippets/benchmark/results", repo / "snippets/benchmark/results")
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    assert config.count("execute: true") == 1, "mkdocs-jupyter's execute setting moved"
    # the notebooks need not run for this check: a third of a build's time
    (repo / "mkdocs.yml").write_text(config.replace("execute: true", "execute: false"), encoding="utf-8")
    page = repo / "docs" / lang / "ddp.md"
    page.write_text(page.read_text(encoding="utf-8") + planted, encoding="utf-8")

    build = build_site(tmp_path / "site", cwd=repo)
    log = build.stdout + build.stderr
    assert build.returncode != 0, "a strict build must fail on a broken page"
    for fault in reported:
        assert fault in log, f"the build log does not name {fault}"


def test_build_is_reproducible(build_site, built_site, tmp_path):
    again = tmp_path / "again"
    assert build_site(again).returncode == 0
    compared = filecmp.dircmp(built_site, again)
    differ = []

    def walk(cmp, prefix=""):
        differ.extend(prefix + name for name in cmp.diff_files + cmp.left_only + cmp.right_only)
        for name, sub in cmp.subdirs.items():
            walk(sub, f"{prefix}{name}/")

    walk(compared)
    assert not differ, f"files that differ between two builds of the same sources: {differ[:10]}"
