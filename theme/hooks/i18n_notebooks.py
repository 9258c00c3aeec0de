"""Render notebooks in every language of mkdocs-static-i18n.

static-i18n's ``on_files`` (priority -100) rebuilds every File after mkdocs-jupyter has wrapped
the notebooks, so they would be copied raw (mkdocs-static-i18n issue #198). This hook runs after
static-i18n, wraps the notebooks again with mkdocs-jupyter's ``NotebookFile`` and keeps the
language-aware destination that static-i18n chose (``ko/x.ipynb`` -> ``x/``, ``en/x.ipynb`` -> ``en/x/``).
"""

from pathlib import PurePosixPath

from mkdocs.plugins import event_priority
from mkdocs.structure.files import Files
from mkdocs_jupyter.plugin import NotebookFile


def _page_dest(raw_dest: str, use_directory_urls: bool) -> str:
    """Where a page built from the notebook copied to ``raw_dest`` belongs."""
    path = PurePosixPath(raw_dest).with_suffix("")
    if path.name == "index":
        return (path.parent / "index.html").as_posix()
    if use_directory_urls:
        return (path / "index.html").as_posix()
    return path.with_suffix(".html").as_posix()


@event_priority(-150)  # after static-i18n (-100)
def on_files(files: Files, config) -> Files:
    jupyter = config.plugins["mkdocs-jupyter"]
    for file in list(files):
        if isinstance(file, NotebookFile) or not jupyter.should_include(file):
            continue
        notebook = NotebookFile(file, **config)
        notebook.dest_path = _page_dest(file.dest_path, config.use_directory_urls)
        notebook.abs_dest_path = str(PurePosixPath(config.site_dir) / notebook.dest_path)
        notebook.url = notebook._get_url(config.use_directory_urls)
        files.remove(file)
        files.append(notebook)
    return files  # static-i18n's Files subclass, which resolves links per language


@event_priority(-50)  # after static-i18n (50) set the page's alternates
def on_page_context(context, page, config, nav):
    """Point the language switcher of a notebook page at the same notebook in each language.

    static-i18n (priority 50, before this) finds no alternates for the wrapped notebooks and links the
    language roots instead.
    """
    if not isinstance(page.file, NotebookFile):
        return context
    default = next(lang["locale"] for lang in config.plugins["i18n"].config.languages if lang["default"])
    page_url = _page_dest(page.file.norm_src_uri, config.use_directory_urls).removesuffix("index.html")
    # static-i18n assigns the attribute (config.extra.alternate = ...), which templates read before the item
    for alternate in getattr(config.extra, "alternate", None) or config.extra.get("alternate", []):
        prefix = "" if alternate["lang"] == default else f"{alternate['lang']}/"
        alternate["link"] = prefix + page_url
    return context
