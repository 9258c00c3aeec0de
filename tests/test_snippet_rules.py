"""Every snippet is a self-checking program with valid declarations; shared pieces stay identical."""

import ast

import pytest
from markdown_source import ROOT, load_spec_module

SPEC = load_spec_module()
SNIPPETS = SPEC.all_snippets(ROOT)
IDS = [p.relative_to(ROOT / "snippets").as_posix() for p in SNIPPETS]
CANONICAL_SETUP = ROOT / "snippets/ddp/train_torchrun.py"


def functions(path, name):
    source = path.read_text(encoding="utf-8")
    tree = ast.parse(source)
    return [ast.get_source_segment(source, n) for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == name]


@pytest.mark.parametrize("path", SNIPPETS, ids=IDS)
def test_declarations_are_valid(path):
    spec = SPEC.parse_spec(path, ROOT)
    assert spec.timeout_s > 0 and spec.world_size >= 1


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
    """Programs repeat the canonical setup() so each stays copy-paste runnable; no copy may drift."""
    (canonical,) = functions(CANONICAL_SETUP, "setup")
    assert canonical.startswith("def setup() -> torch.device:")
    drifted = [
        path.relative_to(ROOT).as_posix()
        for path in SNIPPETS
        for body in functions(path, "setup")
        if body.startswith("def setup() -> torch.device:") and body != canonical
    ]
    assert not drifted, f"setup() differs from {CANONICAL_SETUP.relative_to(ROOT)}"
