"""The line under each program a page shows: its launch command, how CI tests it, its last recorded runs, its
source (a pass of program_blocks.py).

"run with 2 ranks on CPU with gloo in CI ... · verified: torch 2.14.1 · gloo on CPU · 2 ranks · 2026-12-03". The facts
come from the program's own declarations (guidekit/spec.py) and the committed manifest of recorded runs
(guidekit/outputs.py): one run per platform it passed on (the CPU, then each GPU box by its number of GPUs), so the
line cannot drift from what the runner does; the words from the text catalogue.
"""

from __future__ import annotations

from pathlib import Path

from shown_programs import insert, offers

from guidekit import outputs
from guidekit.spec import Spec, is_snippet, parse_spec
from guidekit.text import text

CLASS = "snippet-note"


def passed(manifest: dict, platform: str, path: str) -> dict | None:
    """The manifest's entry for a program's last run on `platform`, if it passed."""
    entry = manifest[platform].get(path)
    return entry if entry and entry["outcome"] == "passed" else None


def _run(entry: dict, t: dict) -> str:
    """One recorded run, e.g. 'torch 2.14.1 · gloo on CPU · 2 ranks · 2026-12-03'."""
    ranks = t["rank_count"].format(n=entry["ranks"]) if entry["ranks"] > 1 else t["process"]
    if entry["backend"] == "fake":  # one process plays every rank of a fake process group
        ranks = t["fake_ranks"].format(n=entry["ranks"])
    where = t["where"][entry["backend"]].format(device=entry["device"])
    return t["run"].format(torch=entry["torch"], where=where, ranks=ranks, date=entry["date"])


def _verified(spec: Spec, manifest: dict, t: dict) -> str:
    platforms = outputs.platform_order(p for p in manifest if p != outputs.ANY_GPU)  # cpu, cuda-1, cuda-8 ...
    runs = [_run(entry, t) for p in platforms if (entry := passed(manifest, p, spec.path))]
    if not passed(manifest, outputs.ANY_GPU, spec.path):  # until a GPU box records it, every page says so
        runs.append(t["no_gpu_run"])
    return "; ".join(runs) or t["never"]


def note(spec: Spec, lang: str, source_url: str, manifest: dict, command_shown: bool = False) -> str:
    """The note as a Markdown paragraph with its class; the launch command only where the page does not show it."""
    t = text(lang)["note"]
    if spec.gpus:
        how = t["gpu"].format(gpus=spec.gpus)
    elif spec.world_size > 1:
        how = t["ranks"]
    else:
        how = t["cpu"]
    parts = [] if command_shown else [f"`{spec.command}`"]
    parts += [
        f"{t['tested']}: {how}",
        f"{t['verified']}: {_verified(spec, manifest, t)}",
        f"[{t['source']}]({source_url})",
    ]
    return " · ".join(parts) + f"\n{{: .{CLASS} }}"


def shows_command(markdown: str, command: str) -> bool:
    """The page already shows this launch command on a line of its own (a shell block)."""
    return any(line.strip() == command for line in markdown.splitlines())


def noted(markdown: str, root: Path, lang: str, blob: str) -> str:
    """Each program (not a helper) the page shows gets its note once, where the page offers it."""
    manifest = outputs.read_manifest(root)
    return insert(
        markdown,
        [
            (offer, note(spec, lang, blob + offer.path, manifest, shows_command(markdown, spec.command)))
            for offer in offers(markdown, root)
            if is_snippet(root / offer.path) and (spec := parse_spec(root / offer.path, root))
        ],
    )
