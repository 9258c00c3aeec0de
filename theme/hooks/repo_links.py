"""Links to the repository come from one setting: `repo:path` on a page becomes mkdocs.yml's repo_url plus the path
(guidekit.pages.repo_links), before the page is rendered, code blocks included (the clone command)."""

from guidekit.pages import repo_links


def on_page_markdown(markdown, page, config, files):
    return repo_links(markdown, config["repo_url"])


def on_page_content(html, page, config, files):
    """Notebook pages (mkdocs-jupyter) arrive as HTML: their links too."""
    return repo_links(html, config["repo_url"])
