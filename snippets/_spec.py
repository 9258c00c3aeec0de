"""What a snippet declares about itself: how it is launched, what it needs, how long it may take.

Declarations are comment lines near the top of a snippet:

    # launch: torchrun --standalone --nproc-per-node=2 snippets/ddp/train_torchrun.py
    # requires: gpus=2
    # timeout: 180

Shared by the snippet runner (snippets/conftest.py), the site hook that labels every included example
(theme/hooks/snippet_notes.py) and the site tests.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

DEFAULT_TIMEOUT_S = 120
HEADER_LINES = 40  # declarations must appear this close to the top
DECLARATION = re.compile(r"^#\s*(launch|requires|timeout):\s*(.+?)\s*$")
NPROC = re.compile(r"--nproc[-_]per[-_]node[= ](\d+)")


@dataclass(frozen=True)
class Spec:
    path: str  # relative to the repository root, as a reader types it
    launch: list[str]
    gpus: int
    world_size: int
    timeout_s: float

    @property
    def command(self) -> str:
        return shlex.join(self.launch)


def parse_spec(path: Path, root: Path) -> Spec:
    rel = path.relative_to(root).as_posix()
    found: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines()[:HEADER_LINES]:
        match = DECLARATION.match(line)
        if match:
            found[match.group(1)] = match.group(2)
    launch = shlex.split(found.get("launch", f"python {rel}"))
    if launch[0] not in ("python", "torchrun") or rel not in launch:
        raise ValueError(f"{rel}: '# launch:' must be 'python {rel} [args]' or 'torchrun ... {rel} [args]', got {launch}")
    requires = found.get("requires", "")
    if requires == "cuda":
        gpus = 1
    elif requires.startswith("gpus="):
        gpus = int(requires.removeprefix("gpus="))
    elif not requires:
        gpus = 0
    else:
        raise ValueError(f"{rel}: unknown '# requires: {requires}' (use 'cuda' or 'gpus=N')")
    nproc = NPROC.search(" ".join(launch))
    world_size = int(nproc.group(1)) if launch[0] == "torchrun" and nproc else 1
    return Spec(rel, launch, gpus, world_size, float(found.get("timeout", DEFAULT_TIMEOUT_S)))


def is_snippet(path: Path) -> bool:
    return path.suffix == ".py" and path.name != "conftest.py" and not path.name.startswith(("_", "test_"))


def all_snippets(root: Path) -> list[Path]:
    return sorted(p for p in (root / "snippets").rglob("*.py") if is_snippet(p))
