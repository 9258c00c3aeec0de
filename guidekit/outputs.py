r"""Recorded outputs: what each snippet printed on its last recorded run, and where and with what it ran.

``make outputs`` runs every snippet and writes its standard output to ``recordings/<platform>/<path>.txt`` and one
line per snippet to ``recordings/manifest.json``. The platform is the kind of machine it ran on: ``cpu``, or
``cuda-<n>`` on a box of n GPUs (guidekit/machine.py), so that the text an 8-GPU box prints (NCCL where a 1-GPU box
falls back to gloo, eight processes where it starts one) never overwrites a 1-GPU box's. Pages include recordings
the way they include code; every later run compares what the snippet prints with its recording, after the
normalisation the snippet declares (guidekit/spec.py):

    # output-varies: port (\\d+)               (a regex; each group, or the whole match, may differ between runs)
    # output-excerpt: timeout ^all_reduce:    (section `timeout`: the first to the last line matching the regex)

Everything else must match exactly, in the order printed. Ranks that print at the same moment have no stable
order, and under torchrun (`python -u`) their lines can even mix mid-line: a program prints from one rank, or
in rank order. An excerpt becomes a named section of the recording, so a page can include
``recordings/cpu/x/y.txt:timeout``.

Recordings are made with the newest torch CI tests, and the manifest says which torch made each. A run on another
torch may print other text (torch 2.10's gloo writes "[Gloo] Rank 0 is connected to 1 peer ranks" from every rank
at once, mixed into the program's lines): the runner then shows the difference, names both versions and passes the
program on its own asserts (guidekit/runner.py); on the recording's own torch any difference fails.
"""

from __future__ import annotations

import difflib
import fcntl
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from guidekit import ROOT
from guidekit.sections import SECTION_MARKER, marker

OUTPUTS = Path("recordings")  # relative to the repository root: everything a page shows as output
MULTINODE = OUTPUTS / "multinode"  # what the multi-host tests' programs printed (root only)
MANIFEST = "manifest.json"
CPU = "cpu"
GPU_PLATFORM = re.compile(r"cuda-([1-9]\d*)")  # cuda-<n>: a box of n GPUs
ANY_GPU = "cuda"  # read_manifest's view of every GPU platform together (never written)
VARIES = "…"


def is_platform(name: str) -> bool:
    return name == CPU or GPU_PLATFORM.fullmatch(name) is not None


def gpu_count(platform: str) -> int:
    """cuda-8 -> 8; cpu -> 0."""
    found = GPU_PLATFORM.fullmatch(platform)
    return int(found[1]) if found else 0


def platform_order(platforms) -> list[str]:
    """cpu first, then the GPU boxes by their number of GPUs."""
    return sorted(set(platforms), key=lambda name: (name != CPU, gpu_count(name), name))


@dataclass(frozen=True)
class OutputRules:
    """How a snippet's output is compared: declared in its header, empty by default (exact match)."""

    varies: tuple[re.Pattern, ...] = ()
    excerpts: tuple[tuple[str, re.Pattern], ...] = field(default_factory=tuple)


def recording_path(snippet: str, platform: str, root: Path = ROOT) -> Path:
    """snippets/x/y.py -> <root>/recordings/<platform>/x/y.txt"""
    inner = Path(snippet).relative_to("snippets").with_suffix(".txt")
    return root / OUTPUTS / platform / inner


def snippet_of(recording: Path, root: Path = ROOT) -> str:
    """The snippet a recording belongs to, as a repository path."""
    platform_dir = recording.relative_to(root / OUTPUTS)
    inner = Path(*platform_dir.parts[1:]).with_suffix(".py")
    return (Path("snippets") / inner).as_posix()


def header_path(platform: str, root: Path = ROOT) -> Path:
    """The runner's own report header, as the recording run printed it (the GPU box page shows it)."""
    return root / OUTPUTS / platform / "_pytest_header.txt"


def recorded_platforms(root: Path = ROOT) -> list[str]:
    """The platforms with a folder of recordings: cpu, cuda-1, cuda-8 ..."""
    folder = root / OUTPUTS
    found = [p.name for p in folder.iterdir() if p.is_dir() and is_platform(p.name)] if folder.is_dir() else []
    return platform_order(found)


def recordings(root: Path = ROOT) -> list[Path]:
    """Every recording of a snippet's output (the runner's header is not one)."""
    found = (p for platform in recorded_platforms(root) for p in (root / OUTPUTS / platform).rglob("*.txt"))
    return sorted(p for p in found if not p.name.startswith("_"))


def _masked(line: str, rules: OutputRules) -> str:
    for pattern in rules.varies:

        def mask(match: re.Match) -> str:
            if not match.re.groups:
                return VARIES
            text, start = [], match.start()
            for i in range(1, match.re.groups + 1):
                if match.start(i) < 0:
                    continue
                text += [match.string[start : match.start(i)], VARIES]
                start = match.end(i)
            return "".join(text) + match.string[start : match.end()]

        line = pattern.sub(mask, line)
    return line


def normalised(lines: list[str], rules: OutputRules) -> list[str]:
    """What must match exactly: the printed lines with every declared varying part masked."""
    return [_masked(line, rules) for line in lines]


def recording_text(stdout: str, rules: OutputRules) -> str:
    """The file `make outputs` writes: the printed lines, each declared excerpt marked as a named section."""
    lines = stdout.splitlines()
    starts: dict[int, list[str]] = {}
    ends: dict[int, list[str]] = {}
    for name, pattern in rules.excerpts:
        hits = [i for i, line in enumerate(lines) if pattern.search(line)]
        if not hits:
            raise ValueError(f"excerpt {name!r}: no printed line matches {pattern.pattern!r}")
        starts.setdefault(hits[0], []).append(name)
        ends.setdefault(hits[-1], []).append(name)
    out = []
    for i, line in enumerate(lines):
        out += [marker("start", name) for name in starts.get(i, [])]
        out.append(line)
        out += [marker("end", name) for name in ends.get(i, [])]
    return "".join(f"{line}\n" for line in out)


def recorded_lines(recording: str) -> list[str]:
    """The printed lines of a recording, section markers dropped."""
    return [line for line in recording.splitlines() if not SECTION_MARKER.match(line)]


def difference(recording: str, stdout: str, rules: OutputRules) -> str:
    """A unified diff of the recording against a fresh run, after normalisation; '' when they match."""
    expected = normalised(recorded_lines(recording), rules)
    actual = normalised(stdout.splitlines(), rules)
    if expected == actual:
        return ""
    diff = difflib.unified_diff(expected, actual, "recorded", "this run", lineterm="")
    return "\n".join(diff)


# The manifest: platform -> snippet -> what the last recorded run was.
def _stored(text: str) -> dict[str, dict[str, dict]]:
    found = json.loads(text) if text.strip() else {}
    stored = {name: runs for name, runs in found.items() if is_platform(name)}
    stored.setdefault(CPU, {})
    return {name: stored[name] for name in platform_order(stored)}


def any_gpu(manifest: dict[str, dict[str, dict]]) -> dict[str, dict]:
    """snippet -> its run on the GPU box with the most GPUs where it passed, else its entry on the largest box."""
    view: dict[str, dict] = {}
    for platform in sorted((p for p in manifest if GPU_PLATFORM.fullmatch(p)), key=gpu_count):
        for snippet, entry in manifest[platform].items():
            if entry.get("outcome") == "passed" or view.get(snippet, {}).get("outcome") != "passed":
                view[snippet] = entry
    return view


def read_manifest(root: Path = ROOT) -> dict[str, dict[str, dict]]:
    """platform -> snippet -> entry, for 'cpu' (always there) and each 'cuda-<n>' recorded, plus ANY_GPU ('cuda'):
    every GPU box's runs as one (any_gpu), for a page that asks whether a program has run on a GPU at all."""
    path = root / OUTPUTS / MANIFEST
    manifest = _stored(path.read_text(encoding="utf-8") if path.is_file() else "")
    return {**manifest, ANY_GPU: any_gpu(manifest)}


def gpu_platforms(manifest: dict[str, dict[str, dict]]) -> list[str]:
    """The GPU boxes a manifest has runs of, fewest GPUs first."""
    return [p for p in platform_order(manifest) if GPU_PLATFORM.fullmatch(p)]


def manifest_text(manifest: dict[str, dict[str, dict]]) -> str:
    blocks = []
    for platform in platform_order(manifest):
        rows = [f"  {json.dumps(path)}: {json.dumps(entry)}" for path, entry in sorted(manifest[platform].items())]
        blocks.append(f" {json.dumps(platform)}: {{" + ("\n" + ",\n".join(rows) + "\n " if rows else "") + "}")
    return "{\n" + ",\n".join(blocks) + "\n}\n"


def write_manifest(entries: dict[str, dict[str, dict]], root: Path = ROOT) -> None:
    """Merge `entries` (platform -> snippet -> entry) into the committed manifest, one line per snippet. Several
    runs may record at once (`make gpu-check` runs programs side by side, each run writes as each program ends):
    the file is locked while it is read, merged and rewritten."""
    path = root / OUTPUTS / MANIFEST
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a+", encoding="utf-8") as file:
        fcntl.flock(file, fcntl.LOCK_EX)
        file.seek(0)
        manifest = _stored(file.read())
        for platform, runs in entries.items():
            if not is_platform(platform):
                raise ValueError(f"not a platform of recordings: {platform!r}")
            manifest.setdefault(platform, {}).update(runs)
        file.seek(0)
        file.truncate()
        file.write(manifest_text(manifest))
