"""Drop the per-page ``<link rel="alternate" hreflang>`` tags from the page head.

mkdocs-static-i18n points Material's ``extra.alternate`` at the same page in each language, which makes the
language switcher land on the right page. But Material's JavaScript treats every head ``link[rel=alternate]``
as a language root and fetches ``<link>/sitemap.xml`` for it: 404s on every page, in the console and on the
wire. The hreflang alternates stay where search engines also read them: in sitemap.xml (static-i18n writes
``xhtml:link rel="alternate"`` for every page there).
"""

import re

HEAD_ALTERNATE = re.compile(r'\s*<link rel="alternate" href="[^"]*" hreflang="[^"]*">')


def on_post_page(output, page, config):
    head, sep, body = output.partition("</head>")
    return HEAD_ALTERNATE.sub("", head) + sep + body
