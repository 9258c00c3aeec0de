"""Every snippet is a self-checking program with valid declarations that runs alone; declared copies stay identical."""

import ast
import re

import pytest

from guidekit import ROOT, copies
from guidekit.spec import all_snippets, parse_spec, sibling_files

SNIPPETS = all_snippets()
IDS = [p.relative_to(ROOT / "snippets").as_posix() for p in SNIPPETS]
STARTS_RANKS = re.compile(r"\bmp\.spawn\(|torch\.distributed\.run|\btorchrun\b")


@pytest.mark.parametrize("path", SNIPPETS, ids=IDS)
def test_declarations_are_valid(path):
    spec = parse_spec(path)
    assert spec.timeout_s > 0 and spec.world_size >= 1


@pytest.mark.parametrize("path", SNIPPETS, ids=IDS)
def test_programs_that_start_ranks_declare_them(path):
    """A `python` launch that starts ranks itself (mp.spawn, torchrun agents) says how many: `# ranks: N`."""
    spec = parse_spec(path)
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):  # code only: drop docstrings (ast already drops comments)
        if (
            isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            and ast.get_docstring(node) is not None
        ):
            node.body = node.body[1:] or [ast.Pass()]
    body = ast.unparse(tree)
    if spec.launch[0] == "python" and STARTS_RANKS.search(body):
        assert spec.world_size > 1, "starts ranks of its own but declares no '# ranks: N'"


@pytest.mark.parametrize("path", SNIPPETS, ids=IDS)
def test_snippet_checks_its_own_result(path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    checks = [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.Assert)
        or (isinstance(n, ast.Call) and "assert" in ast.unparse(n.func).rsplit(".", 1)[-1].lower())
    ]
    assert checks, "a snippet proves its claim with assert"


# Programs that need files beside them, because that is what they teach; the page offers those files with them.
TAUGHT_TOGETHER = {
    "ddp/train_spawn.py": "only the launcher changes: it imports train_torchrun.py's training",
    "fault/restart_resume.py": "runs the template and its proof, and imports the template's save_atomic",
    "fault/train_resumable_check.py": "a proof imports the template it checks",
    "training/train_loop_check.py": "a proof imports the template it checks",
    "launch/two_nodes.py": "starts env_vars.py as the workers of two simulated nodes (process plumbing in _procs.py)",
    "launch/slurm_sim.py": "runs env_vars.py's setup in every simulated task (process plumbing in _procs.py)",
    "gpu_box/nccl_allreduce.py": "imports allreduce_bw.py's setup and sweep: the page teaches the measurement once",
    "job/train.py": "the model is taught in its own file: imports model.py",
    "job/train_check.py": "a proof imports the template it checks (train.py, model.py) and starts _kill_rank.py",
    "large_models/checkpoint_fsdp2.py": "checkpoints the page's model: imports TinyLM and SavedBytes from memory_breakdown.py",
    "scaling/comm_hook_bf16.py": "the bf16 variant of comm_hooks.py's measurement: imports its wrapper, loop and bound",
    "scaling/ulysses_check.py": "a proof imports the templates it checks (ulysses.py, ring_attention_backward.py)",
}


@pytest.mark.parametrize("path", SNIPPETS, ids=IDS)
def test_snippet_runs_alone(path):
    """A reader copies one program into an empty folder and runs it: it may not need a file beside it, unless that
    is the lesson (TAUGHT_TOGETHER). A helper it would import goes in as a declared copy (guidekit.copies)."""
    rel = path.relative_to(ROOT / "snippets").as_posix()
    needs = sibling_files(path)
    assert not needs or rel in TAUGHT_TOGETHER, f"needs {sorted(needs)} beside it: inline declared copies instead"


@pytest.mark.parametrize("path", [p for p in SNIPPETS if p.stem.endswith("_check")], ids=str)
def test_a_proof_imports_its_template(path):
    """`x_check.py` is the proof beside the template `x.py`: it imports the template and asserts what the page says."""
    template = path.with_name(path.name.removesuffix("_check.py") + ".py")
    assert sibling_files(path).get(template.relative_to(ROOT).as_posix()) == "imports"


def test_declared_copies_match_their_originals():
    """Programs repeat small functions of other files, each under `# same as <path>:<name>`, so every program runs
    alone; an undeclared `setup()` is compared with train_torchrun.py's all the same (guidekit.copies)."""
    problems = copies.problems()
    assert not problems, (
        "\n".join(problems) + "\nrun `python -m guidekit.copies --write` (it cannot add a missing original)"
    )
