"""What a snippet declares about itself: how it is launched, what it needs, how many ranks, how long it may take.

Declarations are comment lines near the top of a snippet:

    # launch: torchrun --standalone --nproc-per-node=2 snippets/ddp/train_torchrun.py
    # requires: gpus=2        ('cuda' or 'gpus=N'; absent: runs on CPU)
    # uses-gpus: all          (needs none, but uses every GPU the machine has, e.g. device_count() processes)
    # inductor: gpus          (compiles with Inductor where its ranks use GPUs; 'always': on CPUs too)
    # ranks: 2                (only for a `python` launch that starts its own ranks, e.g. with mp.spawn)
    # timeout: 180            (seconds; default 120)
    # output-varies / output-excerpt: how its printed output is compared (guidekit/outputs.py)
    # holds-group-at-exit: why  (a known defect: gloo's threads outlive the program's teardown; see below)

`uses-gpus: all` puts the program with the GPU programs on any machine with a GPU (guidekit/schedule.py), so it never
shares a GPU with another program; `Spec.on_gpus(n)` says whether a program uses GPUs on a machine with n of them.
`inductor:` lets the runner check Inductor's build needs (a C compiler, Python's headers) before the program starts
there, and fail with what is missing (guidekit/machine.py) instead of a compile error deep in the program's output.
A program whose processes reach exit with gloo's threads alive fails (guidekit/probe/sitecustomize.py): it would abort
at exit by chance. `holds-group-at-exit:` names such a program whose cause is known but not yet fixed; its runs warn
instead, with the count, in every report.
"""

from __future__ import annotations

import ast
import os
import random
import re
import shlex
import socket
import sys
from dataclasses import dataclass, field
from pathlib import Path

from guidekit import ROOT
from guidekit.outputs import OutputRules

DEFAULT_TIMEOUT_S = 120
HEADER_LINES = 40  # declarations must appear this close to the top
DECLARATION = re.compile(
    r"^#\s*(launch|requires|uses-gpus|inductor|ranks|timeout|output-varies|output-excerpt|holds-group-at-exit):"
    r"\s*(.+?)\s*$"
)
REPEATABLE = ("output-varies", "output-excerpt")
USES_GPUS = ("all",)  # the values `# uses-gpus:` takes
INDUCTOR = ("gpus", "always")  # the values `# inductor:` takes
TORCHRUN_INT_OPTION = r"--{}[= ](\d+)"


@dataclass(frozen=True)
class Spec:
    path: str  # relative to the repository root, as a reader types it
    launch: list[str]
    gpus: int
    world_size: int  # processes that join the job (ranks)
    timeout_s: float
    output: OutputRules = field(default_factory=OutputRules)
    uses_all_gpus: bool = False  # `# uses-gpus: all`
    inductor: str = ""  # `# inductor:` gpus | always | '' (does not compile with Inductor)
    holds_group_at_exit: str = ""  # `# holds-group-at-exit:` why (a known defect, warned about on every run)

    @property
    def command(self) -> str:
        return shlex.join(self.launch)

    def on_gpus(self, devices: int) -> bool:
        """Whether the program uses GPUs on a machine with `devices` of them: it requires them, it uses every GPU
        there is, or every one of its ranks can have a GPU of its own (its setup() then picks NCCL)."""
        if not devices:
            return False
        return bool(self.gpus or self.uses_all_gpus or self.world_size <= devices)

    def needs_inductor(self, devices: int) -> bool:
        """Whether the program compiles with Inductor on a machine with `devices` GPUs."""
        return self.inductor == "always" or (self.inductor == "gpus" and self.on_gpus(devices))


def _torchrun_option(launch: list[str], name: str) -> int | None:
    """An integer torchrun option, spelled with dashes or underscores, before the script."""
    pattern = TORCHRUN_INT_OPTION.format(name.replace("-", "[-_]"))
    found = re.search(pattern, " ".join(launch))
    return int(found.group(1)) if found else None


def parse_spec(path: Path, root: Path = ROOT) -> Spec:
    rel = path.resolve().relative_to(root.resolve()).as_posix()
    found: dict[str, str] = {}
    repeated: dict[str, list[str]] = {name: [] for name in REPEATABLE}
    for line in path.read_text(encoding="utf-8").splitlines()[:HEADER_LINES]:
        match = DECLARATION.match(line)
        if match and match[1] in REPEATABLE:
            repeated[match[1]].append(match[2])
        elif match:
            found[match[1]] = match[2]
    launch = shlex.split(found.get("launch", f"python {rel}"))
    if launch[0] not in ("python", "torchrun") or rel not in launch:
        raise ValueError(
            f"{rel}: '# launch:' must be 'python {rel} [args]' or 'torchrun ... {rel} [args]', got {launch}"
        )
    requires = found.get("requires", "")
    if requires == "cuda":
        gpus = 1
    elif requires.startswith("gpus="):
        gpus = int(requires.removeprefix("gpus="))
    elif not requires:
        gpus = 0
    else:
        raise ValueError(f"{rel}: unknown '# requires: {requires}' (use 'cuda' or 'gpus=N')")
    uses_gpus = found.get("uses-gpus", "")
    if uses_gpus and uses_gpus not in USES_GPUS:
        raise ValueError(f"{rel}: unknown '# uses-gpus: {uses_gpus}' (use 'all')")
    inductor = found.get("inductor", "")
    if inductor and inductor not in INDUCTOR:
        raise ValueError(f"{rel}: unknown '# inductor: {inductor}' (use 'gpus' or 'always')")
    if launch[0] == "torchrun":
        if "ranks" in found:
            raise ValueError(f"{rel}: '# ranks:' is for python launches; torchrun's options give the ranks")
        world_size = (_torchrun_option(launch, "nproc-per-node") or 1) * (_torchrun_option(launch, "nnodes") or 1)
    else:
        world_size = int(found.get("ranks", 1))
    excerpts = []
    for excerpt in repeated["output-excerpt"]:
        name, _, regex = excerpt.partition(" ")
        if not re.fullmatch(r"[\w\-]+", name) or not regex.strip():
            raise ValueError(f"{rel}: '# output-excerpt: {excerpt}' must be '<name> <regex>'")
        excerpts.append((name, re.compile(regex.strip())))
    rules = OutputRules(tuple(map(re.compile, repeated["output-varies"])), tuple(excerpts))
    timeout = float(found.get("timeout", DEFAULT_TIMEOUT_S))
    held = found.get("holds-group-at-exit", "")
    return Spec(rel, launch, gpus, world_size, timeout, rules, uses_gpus == "all", inductor, held)


# Ports for MASTER_PORT lie below Linux's ephemeral range (32768-60999), where no bind(0) or connect() of a
# concurrent snippet can take one between our check and the launcher's bind; each pytest-xdist worker has a block.
PORT_BLOCK, FIRST_PORT = 1000, 20000
BLOCKS = (32768 - FIRST_PORT) // PORT_BLOCK


def free_port() -> int:
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw"))
    first = FIRST_PORT + worker % BLOCKS * PORT_BLOCK
    for port in random.sample(range(first, first + PORT_BLOCK), PORT_BLOCK):
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:  # in use
                continue
            return port
    raise RuntimeError(f"no free port in {first}-{first + PORT_BLOCK - 1}")


def launch_command(spec: Spec, port: int) -> list[str]:
    """The declared launch as the tests start it: with this interpreter, and torchrun on `port` unless the launch
    picks its own (--standalone, a rendezvous endpoint)."""
    program, *args = spec.launch
    if program == "python":
        return [sys.executable, *args]
    if "--standalone" not in args and not any(a.startswith("--rdzv") for a in args):
        args = [f"--master-port={port}", *args]
    return [sys.executable, "-m", "torch.distributed.run", *args]


# Variables a GPU box's environment may set that change torch's TF32 defaults: NGC's PyTorch containers set
# TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1, which starts torch with float32_matmul_precision "high" (TF32 in fp32 matmuls;
# ATen/Context.h), and NVIDIA_TF32_OVERRIDE=0 turns TF32 off inside cuBLAS and cuDNN, below torch. The programs'
# fp32 tolerances assume torch's own defaults, so the runner removes both (its pytest header says which it found).
TF32_OVERRIDES = ("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE", "NVIDIA_TF32_OVERRIDE")


def tf32_overrides(environ=os.environ) -> dict[str, str]:
    """The TF32 overrides set in `environ` (and so removed for the programs)."""
    return {name: environ[name] for name in TF32_OVERRIDES if name in environ}


def launch_env(port: int) -> dict[str, str]:
    """This environment, less the TF32 overrides, plus what every launched program gets: a rendezvous on `port`,
    one thread a rank."""
    return {
        **{name: value for name, value in os.environ.items() if name not in TF32_OVERRIDES},
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "OMP_NUM_THREADS": "1",  # one thread per rank: ranks share few cores
        "PYTHONUNBUFFERED": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
    }


def is_snippet(path: Path) -> bool:
    return path.suffix == ".py" and path.name != "conftest.py" and not path.name.startswith(("_", "test_"))


def all_snippets(root: Path = ROOT) -> list[Path]:
    return sorted(p for p in (root / "snippets").rglob("*.py") if is_snippet(p))


def sibling_files(path: Path, root: Path = ROOT) -> dict[str, str]:
    """Files from its own folder that a program needs beside it: repository path -> 'imports' or 'runs'.

    `python folder/x.py` puts the folder on sys.path, so `from _mesh import ...` finds `folder/_mesh.py`; a program
    may also start a sibling by name (`Path(__file__).with_name("env_vars.py")`). Followed through those files too.
    """
    folder = path.resolve().parent
    found: dict[Path, str] = {}
    todo = [path.resolve()]
    while todo:
        for node in ast.walk(ast.parse(todo.pop(0).read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names, how = [f"{alias.name.split('.')[0]}.py" for alias in node.names], "imports"
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names, how = [f"{node.module.split('.')[0]}.py"], "imports"
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.endswith(".py"):
                names, how = [node.value], "runs"
            else:
                continue
            for name in names:
                sibling = folder / name
                if "/" not in name and sibling.is_file() and sibling != path.resolve() and sibling not in found:
                    found[sibling] = how
                    todo.append(sibling)
    return {p.relative_to(root.resolve()).as_posix(): found[p] for p in sorted(found)}
