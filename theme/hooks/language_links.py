"""Drop the per-page ``<link rel="alternate" hreflang>`` tags from the page head; on the 404 page, point the language
menu at each language's home.

mkdocs-static-i18n points Material's ``extra.alternate`` at the same page in each language, which makes the
language switcher land on the right page. But Material's JavaScript treats every head ``link[rel=alternate]``
as a language root and fetches ``<link>/sitemap.xml`` for it: 404s on every page, in the console and on the
wire. The hreflang alternates stay where search engines also read them: in sitemap.xml (static-i18n writes
``xhtml:link rel="alternate"`` for every page there).

The 404 page is a template, not a page: it is rendered after the last page, with that page's alternates (the English
performance page's), so its language menu would lead there. It leads to the homes instead: ``/`` and ``/en/``.
"""

import re
from urllib.parse import urlsplit

from guidekit.pages import DEFAULT_LANG

HEAD_ALTERNATE = re.compile(r'\s*<link rel="alternate" href="[^"]*" hreflang="[^"]*">')
MENU_LINK = re.compile(r'<a href="[^"]*" hreflang="(?P<lang>[^"]*)"')


def without_head_alternates(output: str) -> str:
    head, sep, body = output.partition("</head>")
    return HEAD_ALTERNATE.sub("", head) + sep + body


def on_post_page(output, page, config):
    return without_head_alternates(output)


def on_post_template(output, template_name, config):
    if template_name != "404.html":
        return output
    root = urlsplit(config["site_url"] or "/").path.rstrip("/") + "/"

    def home(match):
        lang = match["lang"]
        return f'<a href="{root if lang == DEFAULT_LANG else f"{root}{lang}/"}" hreflang="{lang}"'

    return MENU_LINK.sub(home, without_head_alternates(output))
