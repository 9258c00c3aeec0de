"""One search index per language: ``search/search_index.json`` for Korean, ``en/search/search_index.json`` for English.

mkdocs-static-i18n builds the languages one after the other and writes one index of all of them at the site root,
which every page then loads: twice the bytes a reader needs, twice the index for the browser to build, and results
in the other language. Material fetches ``search/search_index.json`` relative to the ``base`` in a page's
``__config`` and resolves result locations against it too; on a page of another language that base becomes the
language's own root (``../en/`` from ``/en/``), as in a build of that language alone. Nothing else the site uses
reads it (Material's palette and other stored choices are scoped by a separate value, left alone).
"""

import json
import re
from pathlib import Path

from mkdocs.plugins import event_priority

CONFIG_BASE = re.compile(r'(<script id="__config" type="application/json">[^<]*?"base": ")([^"]*)(")')


def other_language(url: str, config) -> str | None:
    """The language folder a page (or index entry) lives in, None for the default language at the root."""
    i18n = config.plugins["i18n"]
    folder = url.split("/", 1)[0]
    return folder if folder != i18n.default_language and folder in i18n.build_languages else None


def on_post_page(output, page, config):
    lang = other_language(page.url, config)
    if lang is None:
        return output
    output, found = CONFIG_BASE.subn(lambda m: f"{m[1]}{m[2]}/{lang}/{m[3]}", output, count=1)
    if not found:
        raise ValueError(f"{page.file.src_uri}: no __config base to point at the {lang} search index")
    return output


@event_priority(-200)  # after static-i18n's post_build (-100), which builds the other languages and writes the index
def on_post_build(config):
    if config.plugins["i18n"].building:
        return  # a language built inside static-i18n's post_build: the whole index comes after the last one
    site = Path(config.site_dir)
    index = json.loads((site / "search" / "search_index.json").read_text(encoding="utf-8"))
    docs: dict[str | None, list[dict]] = {}
    for doc in index["docs"]:
        lang = other_language(doc["location"], config)
        location = doc["location"].removeprefix(f"{lang}/") if lang else doc["location"]
        docs.setdefault(lang, []).append({**doc, "location": location})
    for lang, entries in docs.items():
        path = site / (lang or "") / "search" / "search_index.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps({**index, "docs": entries}, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        path.write_text(text, encoding="utf-8")
