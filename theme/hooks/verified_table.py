"""The home page's table of every example and its last recorded runs: ``<!-- verified-examples -->`` becomes one row
per program, x (CPU/gloo, GPU/NCCL), each cell the torch and date of its last passed run from the committed manifest
(guidekit/outputs.py), each program linked to the first page that shows it."""

from __future__ import annotations

from pathlib import Path

from program_notes import passed

from guidekit import outputs
from guidekit.pages import page_files, page_includes
from guidekit.sections import parse_target
from guidekit.spec import all_snippets
from guidekit.text import text

PLACEHOLDER = "<!-- verified-examples -->"


def table(lang: str, root: Path) -> str:
    t, manifest = text(lang)["verified_table"], outputs.read_manifest(root)
    shown: dict[str, str] = {}
    for name in sorted(page_files(lang, root / "docs")):
        for target in page_includes(lang, name, root / "docs"):
            shown.setdefault(parse_target(target).path, name)

    def cell(platform: str, path: str) -> str:
        if entry := passed(manifest, platform, path):
            return f"{entry['torch']} · {entry['date']}"
        return t["skipped"] if path in manifest[platform] else t["not_yet"]

    rows = [f"| {' | '.join(t['header'])} |", "|---|---|---|"]
    for snippet in all_snippets(root):
        path = snippet.relative_to(root).as_posix()
        label = f"[`{path.removeprefix('snippets/')}`]({shown[path]})" if path in shown else f"`{path}`"
        rows.append(f"| {label} | {cell('cpu', path)} | {cell('cuda', path)} |")
    return "\n".join(rows)


def on_page_markdown(markdown, page, config, files):
    if PLACEHOLDER not in markdown:
        return markdown
    lang = getattr(page.file, "locale", None) or config["theme"]["language"]
    return markdown.replace(PLACEHOLDER, table(lang, Path(config.config_file_path).parent))
