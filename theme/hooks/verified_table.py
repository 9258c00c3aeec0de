"""What ran where, from the committed manifest of recorded runs (guidekit/outputs.py) and the programs' own
declarations (guidekit/spec.py), so that no page types a count or a version:

- ``<!-- verified-examples -->`` becomes a table, one row per program, x (CPU/gloo, GPU/NCCL), each cell the torch
  and date of its last passed run, each program linked to the first page that shows it (the "What ran where" page);
- ``<!-- verified-summary -->`` becomes one sentence: how many programs, how many CI runs on the CPU with gloo (with
  the torch and date of the newest recording), how many need CUDA GPUs, how many have a recorded GPU run (the home
  page and the "What ran where" page);
- ``<!-- never-on-gpu -->`` becomes the programs that have no passed run on any GPU box yet, by chapter folder, each
  with its declared need (the GPU box page), or, once every one has, the summary's sentence on GPU runs.

A GPU cell lists each GPU box a program passed on (``cuda-1``, ``cuda-8``: recordings are kept per number of GPUs).
Program links are relative to the page, which must therefore sit at the top of docs/<lang>/."""

from __future__ import annotations

from pathlib import Path

from program_notes import passed

from guidekit import outputs
from guidekit.pages import page_files, page_includes
from guidekit.sections import parse_target
from guidekit.spec import all_snippets, parse_spec
from guidekit.text import text

PLACEHOLDER = "<!-- verified-examples -->"
SUMMARY = "<!-- verified-summary -->"
NEVER_ON_GPU = "<!-- never-on-gpu -->"


def first_pages(lang: str, root: Path) -> dict[str, str]:
    """program path -> the first page (docs/<lang>/ relative) that includes it."""
    shown: dict[str, str] = {}
    for name in sorted(page_files(lang, root / "docs")):
        for target in page_includes(lang, name, root / "docs"):
            shown.setdefault(parse_target(target).path, name)
    return shown


def table(lang: str, root: Path) -> str:
    t, manifest = text(lang, root)["verified_table"], outputs.read_manifest(root)
    shown = first_pages(lang, root)

    def cell(path: str) -> str:
        if entry := passed(manifest, outputs.CPU, path):
            return f"{entry['torch']} · {entry['date']}"
        return t["skipped"] if path in manifest[outputs.CPU] else t["not_yet"]

    def gpu_cell(path: str) -> str:
        runs = [
            f"{entry['torch']} · {entry['date']} ({platform})"
            for platform in outputs.gpu_platforms(manifest)
            if (entry := passed(manifest, platform, path))
        ]
        if runs:
            return "; ".join(runs)
        return t["skipped"] if path in manifest[outputs.ANY_GPU] else t["not_yet"]

    rows = [f"| {' | '.join(t['header'])} |", "|---|---|---|"]
    for snippet in all_snippets(root):
        path = snippet.relative_to(root).as_posix()
        label = f"[`{path.removeprefix('snippets/')}`]({shown[path]})" if path in shown else f"`{path}`"
        rows.append(f"| {label} | {cell(path)} | {gpu_cell(path)} |")
    return "\n".join(rows)


def never_on_gpu(lang: str, root: Path) -> str:
    """The programs with no passed run on any GPU box, one line per chapter folder, each linked to its first page
    and marked with its declared need (`requires: gpus=2`, `uses-gpus: all`)."""
    manifest, shown = outputs.read_manifest(root), first_pages(lang, root)
    folders: dict[str, list[str]] = {}
    for snippet in all_snippets(root):
        path = snippet.relative_to(root).as_posix()
        if passed(manifest, outputs.ANY_GPU, path):
            continue
        spec = parse_spec(snippet, root)
        need = f"gpus={spec.gpus}" if spec.gpus else ("uses-gpus: all" if spec.uses_all_gpus else "")
        label = f"[`{snippet.name}`]({shown[path]})" if path in shown else f"`{snippet.name}`"
        folders.setdefault(snippet.parent.name, []).append(f"{label} ({need})" if need else label)
    if not folders:
        t = text(lang, root)["verified_table"]
        return t["gpu_runs"].format(**counts(root))
    return "\n".join(f"- `{folder}/`: {', '.join(names)}" for folder, names in folders.items())


def counts(root: Path) -> dict:
    """The figures of the summary: programs, passed CPU runs (with their newest torch and date), programs that need
    CUDA GPUs, passed GPU runs."""
    manifest = outputs.read_manifest(root)
    paths = [snippet.relative_to(root).as_posix() for snippet in all_snippets(root)]
    cpu = [entry for path in paths if (entry := passed(manifest, "cpu", path))]
    newest = max(cpu, key=lambda entry: entry["date"], default={"torch": "?", "date": "?"})
    return {
        "programs": len(paths),
        "cpu": len(cpu),
        "torch": newest["torch"],
        "date": newest["date"],
        "gpu": sum(1 for snippet in all_snippets(root) if parse_spec(snippet, root).gpus),
        "gpu_runs": sum(1 for path in paths if passed(manifest, outputs.ANY_GPU, path)),
    }


def summary(lang: str, root: Path) -> str:
    t, figures = text(lang, root)["verified_table"], counts(root)
    gpu_runs = t["gpu_runs"] if figures["gpu_runs"] else t["gpu_runs_none"]
    return f"{t['summary'].format(**figures)} {gpu_runs.format(**figures)}"


def on_page_markdown(markdown, page, config, files):
    if PLACEHOLDER not in markdown and SUMMARY not in markdown and NEVER_ON_GPU not in markdown:
        return markdown
    lang = getattr(page.file, "locale", None) or config["theme"]["language"]
    root = Path(config.config_file_path).parent
    if SUMMARY in markdown:
        markdown = markdown.replace(SUMMARY, summary(lang, root))
    if PLACEHOLDER in markdown:
        markdown = markdown.replace(PLACEHOLDER, table(lang, root))
    if NEVER_ON_GPU in markdown:
        markdown = markdown.replace(NEVER_ON_GPU, never_on_gpu(lang, root))
    return markdown
