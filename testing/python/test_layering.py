"""The package's layers import downwards only, and its subpackages import each other in no circle.

Every `import` of a tilelang module counts, including those inside functions (a lazy import is still
a dependency). The layers, lowest first, are in `LAYERS`; a module may import its own layer and the
ones below. A new subpackage gets a line here.
"""

import ast
import os

import tilelang

LAYERS = [
    # Facts every layer may use: errors, dtypes, options and the environment, IR helpers.
    ["errors", "dtypes", "env", "log", "options", "utils", "version"],
    # Index algebra, and the table of device intrinsics the lowering emits and codegen spells.
    ["layout", "intrinsics"],
    ["op"],  # tile ops: user functions, layout rules, lowerings
    ["language"],  # the T.* surface, built on the ops
    ["transform", "analysis"],  # passes, and analyses of their output
    ["engine", "codegen"],  # the pass pipeline, CUDA source and nvcc
    ["profiler"],  # timing and checking a callable over a parameter list (a kernel's, duck-typed)
    ["jit", "cache"],  # compiled kernels and their disk cache
    ["autotuner"],  # tuning jit kernels
    # The public package surface and user tools on top of everything.
    ["(top)", "testing", "tools", "contrib", "carver", "math", "tvm", "cuda"],
]
# Public-compatibility modules that re-export from higher layers by design (a user imports them by
# their public TileLang names): they sit at the top whatever their folder.
TOP_MODULES = {"tilelang.utils.tensor", "tilelang.engine.callback"}

ROOT = os.path.dirname(tilelang.__file__)


def _modules():
    for folder, _, files in os.walk(ROOT):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                rel = os.path.relpath(path, os.path.dirname(ROOT))[:-3].replace(os.sep, ".")
                yield rel.removesuffix(".__init__"), path


def _imports(path, module):
    tree = ast.parse(open(path).read())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against the module's package
                package = module.rsplit(".", node.level - (1 if path.endswith("__init__.py") else 0))[0]
                base = f"{package}.{node.module}" if node.module else package
            else:
                base = node.module or ""
            yield base
            yield from (f"{base}.{a.name}" for a in node.names)


def _part(module: str) -> str:
    if module in TOP_MODULES:
        return "(top)"
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "(top)"


def _level(part: str) -> int:
    for k, layer in enumerate(LAYERS):
        if part in layer:
            return k
    raise AssertionError(f"tilelang.{part} is in no layer of testing/python/test_layering.py: add it")


def _edges():
    known = {m for m, _ in _modules()}
    for module, path in _modules():
        for target in _imports(path, module):
            if target.startswith("tilelang.") and (target in known or target.rsplit(".", 1)[0] in known):
                target = target if target in known else target.rsplit(".", 1)[0]
                yield module, target


def test_every_import_goes_to_the_same_layer_or_below():
    upward = [f"{m} imports {t}" for m, t in _edges() if _level(_part(t)) > _level(_part(m))]
    assert not upward, "imports from a lower layer to a higher one:\n" + "\n".join(sorted(upward))


def test_subpackages_import_each_other_in_no_circle():
    graph = {}
    for m, t in _edges():
        a, b = _part(m), _part(t)
        if a != b:
            graph.setdefault(a, set()).add(b)
    state, cycle = {}, []

    def visit(node, path):
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                cycle.append(path[path.index(nxt) :] + [nxt] if nxt in path else [node, nxt])
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert not cycle, f"circular imports between subpackages: {cycle}"
