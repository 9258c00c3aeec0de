"""Functions of a program, to test a page or a result file against the program's own code without running it."""

import ast
import math
from pathlib import Path
from types import SimpleNamespace


def functions_of(path: Path, *names: str) -> SimpleNamespace:
    """Top-level functions of a program, compiled from its own source without running its imports (torch)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name in names]
    assert sorted(f.name for f in found) == sorted(names), f"{path.name} lacks one of {names}"
    namespace = {"math": math}
    exec(compile(ast.Module(body=found, type_ignores=[]), str(path), "exec"), namespace)
    return SimpleNamespace(**{name: namespace[name] for name in names})
