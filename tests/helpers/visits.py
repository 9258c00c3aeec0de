"""Pages opened as a reader's browser opens them: console errors, requests that leave 127.0.0.1 (refused: the tests
run offline) and the bytes of each response, as GitHub Pages would send them."""

import gzip
import re

from guidekit import ROOT
from guidekit.pages import url_path

ARTIFACTS = ROOT / "artifacts"
COMPRESSED_TYPES = ("text/", "javascript", "json", "svg", "xml")


class Visit:
    """A page open in a fresh context that records console errors, outside requests and bytes received."""

    def __init__(self, browser, base_url, **context_args):
        self.context = browser.new_context(service_workers="block", **context_args)
        self.errors, self.outside, self.bytes, self.raw_bytes = [], [], {}, {}
        self.context.route(re.compile(r"^(?!http://127\.0\.0\.1[:/]).*"), self._refuse)
        self.page = self.context.new_page()
        self.page.on("console", lambda m: m.type == "error" and self.errors.append(m.text))
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("requestfinished", self._count)

    def forget(self):
        """Start recording afresh, for the next page opened in this tab."""
        self.errors.clear(), self.outside.clear(), self.bytes.clear(), self.raw_bytes.clear()

    def _refuse(self, route):
        if not route.request.url.startswith(("data:", "blob:", "about:")):
            self.outside.append(route.request.url)
        route.abort()

    def _count(self, request):
        response = request.response()
        if response is None:
            return
        try:
            body = response.body()
        except Exception:  # redirects and aborted requests have no body
            return
        kind = response.headers.get("content-type", "")
        self.raw_bytes[request.url] = len(body)
        self.bytes[request.url] = len(gzip.compress(body, 6)) if any(t in kind for t in COMPRESSED_TYPES) else len(body)

    def open(self, url):
        self.page.goto(url, wait_until="networkidle")
        return self.page

    def close(self):
        self.context.close()


def url_of(base_url, lang, name):
    return f"{base_url}/{url_path(lang, name)}"
