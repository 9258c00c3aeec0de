"""Static checks for the bugs that only a GPU box shows, run on the programs' source so that CI (no GPU) finds them.

A program's GPU branch never runs in CI. The bugs the GPU-readiness review found by reading
(`reviews/gpu-readiness-2026-12-06.md`) fall into classes a reading of the syntax tree can catch:

- ``backend``: every ``init_process_group`` names its backend (``"gloo"``, ``"nccl"``, ``"fake"``, a variable);
- ``mesh-before-group``: no ``init_device_mesh`` runs before an ``init_process_group`` with a backend. Where there is
  no group yet, DeviceMesh calls ``init_process_group()`` itself, and since torch 2.15 a group made without a backend
  gets only the detected accelerator's (``{'cuda': 'nccl'}``), so the CPU branch on a box with fewer GPUs than ranks
  has no CPU backend (review row 2);
- ``collective-device``: in a program that can pick NCCL, no tensor created without a device (``torch.tensor(x)``,
  ``torch.zeros(n)``), or brought to the CPU (``.cpu()``), reaches a collective, except on a gloo group made with
  ``new_group(backend="gloo")``; NCCL takes CUDA tensors only (review row 1);
- ``cross-device``: no comparison (``torch.equal``, ``allclose``, ``assert_close``) of a tensor on the CPU with one
  on the device; ``exact-across-devices``: no bitwise ``torch.equal`` (or ``assert_close`` with zero tolerances) of
  a result computed on the device with one computed on the CPU, since GEMMs and reductions round differently there
  (review row 4); ``optimizer-step``: no comparison of the state of an optimizer restored from
  ``torch.load(..., map_location=<device>)`` with a live optimizer's, since the load puts Adam's ``step`` on the
  device and a live Adam keeps it on the CPU (torch ``optim/adam.py``; review row 3);
- ``inductor-declared``: a program that names Inductor declares ``# inductor:`` (guidekit/spec.py), so the runner
  checks Inductor's build needs before it starts.

Reach, honestly: a program is read with the helpers it imports from its own folder. Values are followed inside each
function, in order, through assignments, tuple unpacking, ``for`` targets (``zip``, ``enumerate``, ``.items()``),
comprehensions, subscripts, attributes and method calls, and through the return values of the program's own
functions; a device expression counts as the GPU (the branch CI never runs) unless it is literally ``"cpu"``.
"Computed" means a result that may round differently on another device: a model called on inputs (a variable or
parameter called), or a math op such as matmul, softmax or a sum; elementwise + - * / round the same everywhere
(IEEE 754), and made data (``torch.tensor``), views, indexing and concatenation compute nothing.
Not followed: function parameters (unknown, so never reported), values kept in containers other than literals,
objects' attributes set in one method and read in another, and anything computed at run time. A mesh call counts
as preceded by a group only where every path to it passes an ``init_process_group`` with a backend: both branches
of an ``if``, a ``with`` or ``try`` body, or a call of a function that does so; loops may run zero times. The run-time
side of the mesh check is the probe (guidekit/probe/): every program run reports what its group would get on a
CUDA machine, and the runner fails a CPU run whose group would have no CPU backend there.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, replace
from pathlib import Path

from guidekit import ROOT
from guidekit.spec import all_snippets, parse_spec, sibling_files

COLLECTIVES = {
    "all_reduce", "all_gather", "all_gather_into_tensor", "_all_gather_base", "reduce_scatter",
    "reduce_scatter_tensor", "_reduce_scatter_base", "broadcast", "reduce", "all_to_all", "all_to_all_single",
    "send", "recv", "isend", "irecv", "scatter", "gather", "P2POp",
}  # fmt: skip
NOT_TENSORS = {"op", "group", "async_op", "src", "dst", "group_src", "group_dst", "tag", "peer", "group_peer"}
FACTORIES = {
    "tensor", "as_tensor", "zeros", "ones", "full", "empty", "arange", "rand", "randn", "randint", "randperm",
    "linspace", "logspace", "eye", "from_numpy", "scalar_tensor", "empty_strided",
}  # fmt: skip
LIKE = {"zeros_like", "ones_like", "full_like", "empty_like", "rand_like", "randn_like", "randint_like"}
COMPARISONS = {"equal", "allclose", "isclose", "assert_close", "assert_allclose"}
MATH = {
    "matmul", "mm", "bmm", "addmm", "baddbmm", "einsum", "linear", "conv1d", "conv2d", "conv3d", "softmax",
    "log_softmax", "layer_norm", "rms_norm", "scaled_dot_product_attention", "cross_entropy", "mse_loss", "gelu",
    "silu", "exp", "log", "sum", "mean", "norm", "cumsum", "sin", "cos", "pow", "sqrt", "rsqrt",
}  # fmt: skip  # ops whose results may round differently on another device
PYTHON_VALUES = {"item", "tolist", "numpy", "size", "dim", "numel", "element_size", "data_ptr", "__len__"}
PYTHON_FUNCTIONS = {"float", "int", "len", "round", "abs", "str", "bool", "range", "print", "isinstance"}
DTYPE = re.compile(r"^(torch\.)?(float|double|half|bfloat|int|uint|long|short|bool|complex|cfloat)\w*$|dtype")


@dataclass(frozen=True)
class Finding:
    path: str
    line: int
    rule: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: [{self.rule}] {self.message}"


@dataclass(frozen=True)
class Facts:
    """What is known of a value: where it resides and where it was computed ('cpu', 'dev', None: unknown), whether
    it came from torch.load with a device map_location, and, for an optimizer, where its `step` lives."""

    resides: str | None = None
    computed: str | None = None
    mapped: bool = False
    optim: str | None = None  # "step_cpu" | "step_dev"
    python: bool = False  # a Python value (a constant, .item()), not a tensor
    parts: tuple[Facts, ...] | None = None  # a tuple's elements, for unpacking


UNKNOWN = Facts()
PYTHON = Facts(python=True)


def on(where: str | None) -> Facts:
    return Facts(resides=where, computed=where)


def join(a: Facts, b: Facts) -> Facts:
    """Two paths meet (if/else): what both agree on."""
    if a == b:
        return a
    parts = None
    if a.parts is not None and b.parts is not None and len(a.parts) == len(b.parts):
        parts = tuple(join(x, y) for x, y in zip(a.parts, b.parts))
    return Facts(
        a.resides if a.resides == b.resides else None,
        a.computed if a.computed == b.computed else None,
        a.mapped and b.mapped,
        a.optim if a.optim == b.optim else None,
        a.python and b.python,
        parts,
    )


def combine(values: list[Facts]) -> Facts:
    """An operation's result: it resides where its tensor operands are (the device if any is there), and keeps
    where they were computed. Elementwise + - * / round the same on every device (IEEE 754), and indexing, views
    and concatenation compute nothing, so only a model's forward and the MATH ops count as computing (computed)."""
    tensors = [v for v in values if not v.python and v.resides]
    if not tensors:
        return PYTHON if values and all(v.python for v in values) else UNKNOWN
    where = "dev" if any(v.resides == "dev" for v in tensors) else "cpu"
    done = {v.computed for v in values if v.computed}
    return Facts(where, "dev" if "dev" in done else done.pop() if done else None, any(v.mapped for v in values))


def computed(facts: Facts) -> Facts:
    """The result of a computation that rounds (a forward, a matmul): computed where it resides."""
    return replace(facts, computed=facts.resides) if facts.resides else facts


def element(facts: Facts) -> Facts:
    """An element of a container value: the same facts, without the tuple's parts."""
    return replace(facts, parts=None)


def dotted(node: ast.AST) -> str:
    try:
        return ast.unparse(node)
    except Exception:
        return ""


def device_of(node: ast.AST | None) -> str | None:
    """Where a device expression points, on a GPU box: the CPU only if it says "cpu"."""
    if node is None:
        return None
    text = dotted(node)
    if re.fullmatch(r"""(torch\.device\()?['"]cpu(:\d+)?['"]\)?""", text):
        return "cpu"
    return "dev"


def keyword(call: ast.Call, name: str) -> ast.AST | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def is_zero(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Constant) and node.value == 0


class Program:
    """A program and the helpers it imports from its folder: functions by name, aliases of torch.distributed."""

    def __init__(self, sources: dict[str, str]):
        self.sources = sources  # repository path -> source
        self.trees = {path: ast.parse(source, path) for path, source in sources.items()}
        self.functions: dict[str, ast.FunctionDef] = {}
        self.owner: dict[ast.AST, str] = {}
        self.dist_names: set[str] = {"torch.distributed"}  # how the program names torch.distributed
        self.imported: set[str] = set()  # names imported from torch.distributed / torch.testing
        self.gloo_groups: set[str] = set()
        for path, tree in self.trees.items():
            for node in ast.walk(tree):
                self.owner[node] = path
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    self.functions[node.name] = node
                elif isinstance(node, ast.Import):
                    for alias in node.names:
                        if alias.name == "torch.distributed" and alias.asname:
                            self.dist_names.add(alias.asname)
                elif isinstance(node, ast.ImportFrom) and node.module:
                    if node.module in ("torch", "torch.distributed", "torch.testing"):
                        for alias in node.names:
                            if node.module == "torch" and alias.name == "distributed":
                                self.dist_names.add(alias.asname or alias.name)
                            elif node.module != "torch":
                                self.imported.add(alias.asname or alias.name)
                elif (
                    isinstance(node, ast.Assign)
                    and isinstance(node.value, ast.Call)
                    and self.call_name(node.value) == "new_group"
                ):
                    backend = keyword(node.value, "backend")
                    if isinstance(backend, ast.Constant) and backend.value == "gloo":
                        self.gloo_groups.update(dotted(t) for t in node.targets)
        self.summaries: dict[str, Facts] = {}

    def is_gloo_group(self, group: ast.AST, function: str | None) -> bool:
        """`group=` names a group made with new_group(backend="gloo"), directly or as a parameter of `function` that
        every caller passes such a group."""
        if dotted(group) in self.gloo_groups:
            return True
        if not isinstance(group, ast.Name) or function not in self.functions:
            return False
        params = [a.arg for a in self.functions[function].args.args]
        if group.id not in params:
            return False
        position = params.index(group.id)
        calls = [
            n
            for tree in self.trees.values()
            for n in ast.walk(tree)
            if isinstance(n, ast.Call) and self.call_name(n) == function and isinstance(n.func, ast.Name)
        ]
        passed = [keyword(c, group.id) or (c.args[position] if position < len(c.args) else None) for c in calls]
        return bool(passed) and all(p is not None and dotted(p) in self.gloo_groups for p in passed)

    def call_name(self, call: ast.Call) -> str:
        """The name a call uses: `dist.all_reduce(...)` -> all_reduce, `torch.equal` -> equal, `f(...)` -> f."""
        func = call.func
        if isinstance(func, ast.Attribute):
            return func.attr
        return func.id if isinstance(func, ast.Name) else ""

    def is_dist(self, call: ast.Call) -> bool:
        func = call.func
        if isinstance(func, ast.Attribute):
            return dotted(func.value) in self.dist_names
        return isinstance(func, ast.Name) and func.id in self.imported

    def can_pick_nccl(self) -> bool:
        """The program names NCCL, or makes a mesh on a device that is not literally the CPU (DeviceMesh then picks
        the accelerator's backend)."""
        for tree in self.trees.values():
            for node in ast.walk(tree):
                if isinstance(node, ast.Constant) and node.value == "nccl":
                    return True
                if isinstance(node, ast.Call) and self.call_name(node) == "init_device_mesh":
                    where = node.args[0] if node.args else keyword(node, "device_type")
                    if device_of(where) != "cpu":
                        return True
        return False


class Flow:
    """Follows values through one function's statements (see the module's docstring for the reach)."""

    def __init__(self, program: Program, checks: Checks | None):
        self.program, self.checks = program, checks
        self.function_name: str | None = None  # the function being followed

    # expressions
    def value(self, node: ast.AST | None, env: dict[str, Facts]) -> Facts:
        if node is None:
            return UNKNOWN
        if isinstance(node, ast.Constant):
            return PYTHON
        if isinstance(node, ast.Name):
            return env.get(node.id, UNKNOWN)
        if isinstance(node, ast.Attribute):
            return element(env.get(dotted(node), self.value(node.value, env)))
        if isinstance(node, ast.Subscript):
            return element(self.value(node.value, env))
        if isinstance(node, ast.Starred):
            return self.value(node.value, env)
        if isinstance(node, ast.BinOp):
            return combine([self.value(node.left, env), self.value(node.right, env)])
        if isinstance(node, ast.UnaryOp):
            return self.value(node.operand, env)
        if isinstance(node, ast.IfExp):
            return join(self.value(node.body, env), self.value(node.orelse, env))
        if isinstance(node, ast.Tuple | ast.List):
            parts = tuple(self.value(e, env) for e in node.elts)
            tensors = [p for p in parts if p.resides]
            first = (
                element(tensors[0]) if tensors and all(t.resides == tensors[0].resides for t in tensors) else UNKNOWN
            )
            return replace(first, parts=parts)
        if isinstance(node, ast.ListComp | ast.GeneratorExp | ast.SetComp):
            return element(self.value(node.elt, self.bind_generators(node.generators, env)))
        if isinstance(node, ast.Call):
            return self.call(node, env)
        return UNKNOWN

    def call(self, node: ast.Call, env: dict[str, Facts]) -> Facts:
        name, func = self.program.call_name(node), node.func
        args = [self.value(a, env) for a in node.args]
        base = self.value(func.value, env) if isinstance(func, ast.Attribute) else UNKNOWN
        prefix = dotted(func.value) if isinstance(func, ast.Attribute) else ""
        if prefix == "torch" and name in FACTORIES:  # made there, not computed: data, like a constant
            return Facts(resides=device_of(keyword(node, "device")) or "cpu")
        if prefix == "torch" and name in LIKE:
            given = keyword(node, "device")
            return Facts(resides=device_of(given)) if given is not None else (element(args[0]) if args else UNKNOWN)
        if prefix == "torch" and name == "load":
            where = device_of(keyword(node, "map_location"))
            return Facts(resides=where, mapped=where == "dev")
        if prefix.endswith("optim") or name == "ZeroRedundancyOptimizer":
            on_device = any(dotted(keyword(node, k) or ast.Constant(False)) == "True" for k in ("fused", "capturable"))
            return Facts(optim="step_dev" if on_device else "step_cpu")
        if isinstance(func, ast.Attribute):
            if name == "cpu":
                return Facts("cpu", base.computed, base.mapped)
            if name == "cuda":
                return Facts("dev", base.computed, base.mapped)
            if name == "to":
                target = keyword(node, "device") or (node.args[0] if node.args else None)
                if target is None or DTYPE.search(dotted(target)):
                    return base
                return Facts(device_of(target), base.computed, base.mapped, base.optim)
            if name in PYTHON_VALUES:
                return PYTHON
            if name in ("items", "values", "keys", "state_dict", "parameters", "named_parameters", "buffers"):
                return element(base)
            if prefix in ("torch", "F", "nn.functional", "torch.nn.functional"):
                return computed(combine(args)) if name in MATH else combine(args)
            return element(base) if not args else combine([base, *args])
        if name in self.program.summaries:
            return self.program.summaries[name]
        if name in PYTHON_FUNCTIONS:
            return PYTHON
        if name == "zip":
            return Facts(parts=tuple(element(a) for a in args))
        if name == "enumerate":
            return Facts(parts=(PYTHON, element(args[0]) if args else UNKNOWN))
        if name in ("list", "tuple", "sorted", "reversed"):
            return args[0] if args else UNKNOWN
        if name in env:  # a model called on inputs: computed where they are
            return computed(combine([env[name], *args])) if args else UNKNOWN
        return combine(args) if args else UNKNOWN  # a function the program imports

    def item_of(self, iterable: ast.AST, env: dict[str, Facts]) -> Facts:
        """What a `for` target gets from the iterable."""
        facts = self.value(iterable, env)
        if isinstance(iterable, ast.Call) and self.program.call_name(iterable) == "items":
            return Facts(parts=(PYTHON, element(facts)))
        if isinstance(iterable, ast.Call) and self.program.call_name(iterable) in ("zip", "enumerate"):
            return facts
        return element(facts)

    def bind_generators(self, generators: list[ast.comprehension], env: dict[str, Facts]) -> dict[str, Facts]:
        env = dict(env)
        for generator in generators:
            self.assign(generator.target, self.item_of(generator.iter, env), env)
        return env

    def assign(self, target: ast.AST, facts: Facts, env: dict[str, Facts]) -> None:
        if isinstance(target, ast.Tuple | ast.List):
            parts = facts.parts
            for i, elt in enumerate(target.elts):
                part = parts[i] if parts is not None and i < len(parts) else element(facts)
                self.assign(elt, part, env)
        elif isinstance(target, ast.Name | ast.Attribute):
            env[dotted(target)] = facts
        elif isinstance(target, ast.Starred):
            self.assign(target.value, element(facts), env)

    # statements
    def block(self, statements: list[ast.stmt], env: dict[str, Facts], returns: list[Facts]) -> dict[str, Facts]:
        for statement in statements:
            env = self.statement(statement, env, returns)
        return env

    def statement(self, node: ast.stmt, env: dict[str, Facts], returns: list[Facts]) -> dict[str, Facts]:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            return env
        self.check_expressions(node, env)
        if isinstance(node, ast.Assign):
            facts = self.value(node.value, env)
            for target in node.targets:
                self.assign(target, facts, env)
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            self.assign(node.target, self.value(node.value, env), env)
        elif isinstance(node, ast.AugAssign):
            self.assign(node.target, combine([self.value(node.target, env), self.value(node.value, env)]), env)
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            self.side_effect(node.value, env)
        elif isinstance(node, ast.Return) and node.value is not None:
            returns.append(self.value(node.value, env))
        elif isinstance(node, ast.If):
            body = self.block(node.body, dict(env), returns)
            orelse = self.block(node.orelse, dict(env), returns)
            return {k: join(body.get(k, UNKNOWN), orelse.get(k, UNKNOWN)) for k in body.keys() | orelse.keys()}
        elif isinstance(node, ast.For | ast.AsyncFor):
            self.assign(node.target, self.item_of(node.iter, env), env)
            env = self.block(node.body, env, returns)
            env = self.block(node.orelse, env, returns)
        elif isinstance(node, ast.While):
            env = self.block(node.body, env, returns)
        elif isinstance(node, ast.With | ast.AsyncWith):
            for item in node.items:
                if item.optional_vars is not None:
                    self.assign(item.optional_vars, self.value(item.context_expr, env), env)
            env = self.block(node.body, env, returns)
        elif isinstance(node, ast.Try):
            env = self.block(node.body, env, returns)
            for handler in node.handlers:
                env = self.block(handler.body, env, returns)
            env = self.block(node.orelse + node.finalbody, env, returns)
        return env

    def side_effect(self, call: ast.Call, env: dict[str, Facts]) -> None:
        """`optimizer.load_state_dict(torch.load(..., map_location=device))` leaves `step` on the device."""
        func = call.func
        if isinstance(func, ast.Attribute) and func.attr == "load_state_dict" and call.args:
            owner = self.value(func.value, env)
            if owner.optim and self.value(call.args[0], env).mapped:
                env[dotted(func.value)] = replace(owner, optim="step_dev")

    def check_expressions(self, node: ast.stmt, env: dict[str, Facts]) -> None:
        """Every call in the statement (not in nested blocks), comprehension targets bound."""
        if self.checks is None:
            return
        nested = ("body", "orelse", "finalbody", "handlers")
        roots = [v for k, v in ast.iter_fields(node) if k not in nested]
        todo = [(r, env) for root in roots for r in (root if isinstance(root, list) else [root])]
        while todo:
            expr, scope = todo.pop()
            if not isinstance(expr, ast.AST) or isinstance(expr, ast.Lambda):
                continue
            if isinstance(expr, ast.ListComp | ast.GeneratorExp | ast.SetComp | ast.DictComp):
                scope = self.bind_generators(expr.generators, scope)
            if isinstance(expr, ast.Call):
                self.checks.call(expr, scope, self)
            todo += [(child, scope) for child in ast.iter_child_nodes(expr)]

    def function(self, node: ast.FunctionDef | ast.AsyncFunctionDef, env: dict[str, Facts] | None = None) -> Facts:
        returns: list[Facts] = []
        outer, self.function_name = self.function_name, node.name
        arguments = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
        scope = {**(env or {}), **{a.arg: UNKNOWN for a in arguments}}  # known by name, not by value
        self.block(node.body, scope, returns)
        self.function_name = outer
        if not returns:
            return UNKNOWN
        result = returns[0]
        for other in returns[1:]:
            result = join(result, other)
        return result


class Checks:
    """The device checks, applied to each call Flow meets."""

    def __init__(self, program: Program):
        self.program = program
        self.findings: list[Finding] = []
        self.nccl = program.can_pick_nccl()

    def report(self, node: ast.AST, rule: str, message: str) -> None:
        finding = Finding(self.program.owner.get(node, "?"), getattr(node, "lineno", 0), rule, message)
        if finding not in self.findings:
            self.findings.append(finding)

    def call(self, node: ast.Call, env: dict[str, Facts], flow: Flow) -> None:
        name = self.program.call_name(node)
        if name in COLLECTIVES and self.program.is_dist(node) and self.nccl:
            self.collective(node, name, env, flow)
        if name in COMPARISONS and len(node.args) >= 2:
            prefix = dotted(node.func.value) if isinstance(node.func, ast.Attribute) else ""
            if prefix in ("torch", "torch.testing", "testing") or name in self.program.imported:
                self.comparison(node, name, env, flow)

    def collective(self, node: ast.Call, name: str, env: dict[str, Facts], flow: Flow) -> None:
        group = keyword(node, "group")
        if group is not None and self.program.is_gloo_group(group, flow.function_name):
            return
        given = [*node.args, *(k.value for k in node.keywords if k.arg not in NOT_TENSORS)]
        for arg in given:
            facts = flow.value(arg, env)
            if facts.resides == "cpu" or (facts.parts and any(p.resides == "cpu" for p in facts.parts)):
                self.report(
                    node,
                    "collective-device",
                    f"{name}({dotted(arg)}): a tensor on the CPU (made without device=, or moved with .cpu()) "
                    "reaches a collective in a program that can pick NCCL, which takes CUDA tensors only: create "
                    "it on the group's device",
                )

    def comparison(self, node: ast.Call, name: str, env: dict[str, Facts], flow: Flow) -> None:
        a, b = (flow.value(arg, env) for arg in node.args[:2])
        shown = f"{name}({dotted(node.args[0])}, {dotted(node.args[1])})"
        exact = name == "equal" or (is_zero(keyword(node, "rtol")) and is_zero(keyword(node, "atol")))
        if {a.resides, b.resides} == {"cpu", "dev"}:
            self.report(node, "cross-device", f"{shown}: one tensor on the CPU, one on the device: compare on one")
        elif exact and {a.computed, b.computed} == {"cpu", "dev"}:
            self.report(
                node,
                "exact-across-devices",
                f"{shown}: bitwise equality of a result computed on the device with one computed on the CPU; "
                "kernels round differently there: compute both on one device, or use assert_close",
            )
        if {a.optim, b.optim} == {"step_cpu", "step_dev"}:
            self.report(
                node,
                "optimizer-step",
                f"{shown}: optimizer state restored with torch.load(map_location=<device>) holds Adam's `step` on "
                "the device, a live Adam keeps it on the CPU: load with map_location='cpu' or compare on one device",
            )


# The process group before any mesh


def backend_given(call: ast.Call) -> bool:
    """init_process_group names its backend (a constant other than None, or any expression)."""
    given = keyword(call, "backend") or (call.args[0] if call.args else None)
    if any(k.arg is None for k in call.keywords):  # **kwargs: cannot tell
        return True
    return given is not None and not (isinstance(given, ast.Constant) and given.value is None)


class GroupOrder:
    """Whether every path to a call passes an init_process_group that names its backend."""

    def __init__(self, program: Program):
        self.program = program
        self.parents: dict[ast.AST, ast.AST] = {}
        for tree in program.trees.values():
            for parent in ast.walk(tree):
                for child in ast.iter_child_nodes(parent):
                    self.parents[child] = parent
        self.known: dict[str, bool] = {}

    def makes_group(self, node: ast.AST, seen: frozenset[str] = frozenset()) -> bool:
        """Running this statement (or expression) certainly creates a group with a backend."""
        if isinstance(node, ast.If):
            return self.all_make(node.body, seen) and self.all_make(node.orelse, seen)
        if isinstance(node, ast.With | ast.AsyncWith):
            return self.all_make(node.body, seen)
        if isinstance(node, ast.Try):
            return self.all_make(node.body, seen) or self.all_make(node.finalbody, seen)
        if isinstance(node, ast.For | ast.While | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            return False
        for call in (n for n in ast.walk(node) if isinstance(n, ast.Call)):
            name = self.program.call_name(call)
            if name == "init_process_group" and backend_given(call):
                return True
            if name in self.program.functions and name not in seen and self.function_makes_group(name, seen | {name}):
                return True
        return False

    def all_make(self, statements: list[ast.stmt], seen: frozenset[str]) -> bool:
        return any(self.makes_group(s, seen) for s in statements)

    def function_makes_group(self, name: str, seen: frozenset[str]) -> bool:
        if name not in self.known:
            self.known[name] = False  # recursion
            self.known[name] = self.all_make(self.program.functions[name].body, seen)
        return self.known[name]

    def preceded(self, node: ast.AST, seen: frozenset[str] = frozenset()) -> bool:
        """Every path to `node` has made a group: a statement before it in an enclosing block does, or (at the top
        of a function) every place that calls the function does."""
        child, parent = node, self.parents.get(node)
        while parent is not None:
            for field in ("body", "orelse", "finalbody"):
                block = getattr(parent, field, None)
                if isinstance(block, list) and child in block and self.all_make(block[: block.index(child)], seen):
                    return True
            if isinstance(parent, ast.FunctionDef | ast.AsyncFunctionDef):
                return self.callers_preceded(parent.name, seen | {parent.name})
            child, parent = parent, self.parents.get(parent)
        return False

    def callers_preceded(self, name: str, seen: frozenset[str]) -> bool:
        uses = [
            n
            for tree in self.program.trees.values()
            for n in ast.walk(tree)
            if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)
        ]
        if not uses:
            return False
        for use in uses:
            inside = self.enclosing_function(use)
            if inside is not None and inside.name in seen:
                continue  # a recursive call: its first call decides
            if not self.preceded(use, seen):
                return False
        return True

    def enclosing_function(self, node: ast.AST):
        parent = self.parents.get(node)
        while parent is not None and not isinstance(parent, ast.FunctionDef | ast.AsyncFunctionDef):
            parent = self.parents.get(parent)
        return parent


def group_findings(program: Program) -> list[Finding]:
    findings = []
    order = GroupOrder(program)
    for tree in program.trees.values():
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            name = program.call_name(node)
            if name == "init_process_group" and not backend_given(node):
                findings.append(
                    Finding(
                        program.owner[node],
                        node.lineno,
                        "backend",
                        "init_process_group() without a backend: since torch 2.15 it keeps only the accelerator's "
                        "backend; name it ('gloo' on CPU, 'nccl' on GPUs)",
                    )
                )
            if name == "init_device_mesh" and not order.preceded(node):
                findings.append(
                    Finding(
                        program.owner[node],
                        node.lineno,
                        "mesh-before-group",
                        "init_device_mesh may run before init_process_group with a backend: DeviceMesh then creates "
                        "the default group with none, and on a CUDA box torch 2.15 gives it NCCL only, so a CPU "
                        "fallback finds no backend for CPU tensors; call dist.init_process_group('gloo' or 'nccl', "
                        "...) first",
                    )
                )
    return findings


def flow_findings(program: Program) -> list[Finding]:
    checks = Checks(program)
    summaries = Flow(program, None)
    for _ in range(2):  # a function may call one defined below it
        for name, function in program.functions.items():
            program.summaries[name] = summaries.function(function)
    flow = Flow(program, checks)
    for tree in program.trees.values():
        flow.block(tree.body, {}, [])
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                flow.function(node)
    return checks.findings


INDUCTOR = re.compile(r"""['"]inductor['"]""")


def inductor_findings(program: Program, declared: str, main: str) -> list[Finding]:
    for path, source in program.sources.items():
        if INDUCTOR.search(source) and not declared:
            line = source[: INDUCTOR.search(source).start()].count("\n") + 1
            return [
                Finding(
                    path,
                    line,
                    "inductor-declared",
                    f"{main} compiles with Inductor: declare '# inductor: gpus' (or 'always') so that the runner "
                    "checks its C compiler and Python headers before it starts",
                )
            ]
    return []


def check_sources(sources: dict[str, str], inductor: str | None = None) -> list[Finding]:
    """The findings for a program given as {path: source}, its main file first (the planted tests call this)."""
    program = Program(sources)
    findings = group_findings(program) + flow_findings(program)
    if inductor is not None:
        findings += inductor_findings(program, inductor, next(iter(sources)))
    return sorted(findings, key=lambda f: (f.path, f.line, f.rule))


def check_program(path: Path, root: Path = ROOT) -> list[Finding]:
    """The findings for one program of snippets/, read with the helpers it imports from its folder."""
    rel = path.resolve().relative_to(root.resolve()).as_posix()
    sources = {rel: path.read_text(encoding="utf-8")}
    for sibling, how in sibling_files(path, root).items():
        if how == "imports":
            sources[sibling] = (root / sibling).read_text(encoding="utf-8")
    return check_sources(sources, parse_spec(path, root).inductor)


def check_all(root: Path = ROOT) -> dict[str, list[Finding]]:
    return {p.relative_to(root).as_posix(): check_program(p, root) for p in all_snippets(root)}


if __name__ == "__main__":  # python -m guidekit.gpu_safety: every finding in snippets/
    for found in check_all().values():
        for finding in found:
            print(finding)
