"""Every snippet is a self-checking program with valid declarations; standalone copies stay identical."""

import ast
import re

import pytest

from guidekit import ROOT, copies
from guidekit.spec import all_snippets, parse_spec

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


def test_setup_copies_are_identical():
    """Programs repeat the reference setup() so each stays copy-paste runnable; `make sync-copies` fixes drift."""
    assert copies.reference_text().startswith(copies.SIGNATURE)
    assert not copies.drifted(), f"setup() differs from {copies.REFERENCE}: run `make sync-copies`"
