"""One source for the repository's address: mkdocs.yml's repo_url. Pages write `repo:path`, the build expands it
(theme/hooks/repo_links.py), the hooks and the notebook generator read the setting; no file carries its own copy."""

import subprocess

from guidekit import ROOT
from guidekit.pages import mkdocs_setting, repo_address, repo_links

DERIVED = ("notebooks/",)  # generated from the setting (and tested fresh by tests/site/test_notebooks.py)


def test_no_file_hard_codes_the_repository_address():
    repo = mkdocs_setting("repo_url").removeprefix("https://").rstrip("/")
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    copies = [
        path
        for path in tracked.split()
        if path != "mkdocs.yml"
        and not path.startswith(DERIVED)
        and (ROOT / path).is_file()
        and repo in (ROOT / path).read_text(encoding="utf-8", errors="replace")
    ]
    assert not copies, f"{repo} written outside mkdocs.yml (write repo:<path> on pages): {copies}"


def test_repo_references_expand_from_the_setting():
    url = "https://github.com/someone/guide"
    assert repo_address("snippets/ddp/train_torchrun.py", url) == f"{url}/blob/main/snippets/ddp/train_torchrun.py"
    assert repo_address("snippets/benchmark/results/", url) == f"{url}/tree/main/snippets/benchmark/results"
    assert repo_address("#readme", url + "/") == f"{url}#readme"
    assert repo_address(".git", url) == f"{url}.git"
    page = "[a](repo:tests/x.py) and `git clone repo:.git`; not a file:repo:x or http://repo:80"
    assert repo_links(page, url) == (
        f"[a]({url}/blob/main/tests/x.py) and `git clone {url}.git`; not a file:repo:x or http://repo:80"
    )
