"""Every test of a UserError says where the error points (house style: every diagnostic has a test
that checks the message and that the location shown is the user's line).

Each `pytest.raises(UserError ...)` in testing/ and examples/ must, in its `with` block or the 3
lines after it, either check the location (`assert_points_at(` or a `"-->"` in an assertion) or say
why it does not: `# raised at the call: the traceback shows the user's line` (an error about a
Python API call) or `# location: missing (reported)` (a kernel error that shows no user line yet),
on the `with` line or, where that line has no room, on a comment line just above it.
Pure CPU: the files are parsed, not run.
"""

from __future__ import annotations

import ast
import os

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SCANNED = ("testing", "examples")
MARKS = ("assert_points_at(", "-->", "# raised at the call", "# location: missing")
AFTER = 3  # lines after the block that may hold the check
# Sites that cannot check their location yet, each with the check to add: (path, test) -> check.
PENDING: dict = {}


def _user_error_names(tree: ast.Module) -> set[str]:
    """Names UserError goes by in this file (`from tilelang.errors import UserError as E` too)."""
    names = {"UserError"}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            names.update(a.asname for a in node.names if a.name == "UserError" and a.asname)
    return names


def _is_user_error(expr: ast.expr, names: set[str]) -> bool:
    if isinstance(expr, ast.Tuple):
        return any(_is_user_error(e, names) for e in expr.elts)
    if isinstance(expr, ast.Name):
        return expr.id in names
    return isinstance(expr, ast.Attribute) and expr.attr == "UserError"  # errors.UserError, tilelang.errors...


def _raises_user_error(node: ast.AST, names: set[str]) -> bool:
    if not isinstance(node, ast.Call) or not node.args:
        return False
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    return name == "raises" and _is_user_error(node.args[0], names)


def unchecked_sites(path: str) -> list[int]:
    """Lines of the `pytest.raises(UserError ...)` sites in `path` that neither check the location
    nor say why not."""
    with open(path, encoding="utf-8") as f:
        source = f.read()
    if "UserError" not in source or "raises" not in source:
        return []
    tree = ast.parse(source, filename=path)
    names = _user_error_names(tree)
    lines = source.splitlines()
    found = []
    for stmt in ast.walk(tree):
        if not isinstance(stmt, ast.stmt) or isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        if isinstance(stmt, (ast.With, ast.AsyncWith)):
            heads = [item.context_expr for item in stmt.items]
        else:  # `pytest.raises(UserError, fn, *args)` as a plain call: the statement's own expressions
            heads = [n for n in ast.iter_child_nodes(stmt) if isinstance(n, ast.expr)]
        site = next((h for h in heads for n in ast.walk(h) if _raises_user_error(n, names)), None)
        if site is None:
            continue
        first = stmt.lineno - 1
        if first > 0 and lines[first - 1].lstrip().startswith("#"):  # a comment too long for the `with` line
            first -= 1
        text = "\n".join(lines[first : stmt.end_lineno + AFTER])
        if not any(mark in text for mark in MARKS):
            found.append(stmt.lineno)
    return sorted(set(found))


def _python_files():
    for top in SCANNED:
        for folder, dirs, files in os.walk(os.path.join(ROOT, top)):
            dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d != "__pycache__")
            yield from (os.path.join(folder, f) for f in sorted(files) if f.endswith(".py"))


def _test_of(path: str, line: int) -> str:
    """The name of the top-level function of `path` that holds `line`."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), filename=path)
    return next((d.name for d in tree.body if hasattr(d, "name") and d.lineno <= line <= d.end_lineno), "")


def test_every_user_error_test_checks_its_location():
    sites = [
        (os.path.relpath(p, ROOT), line, _test_of(p, line)) for p in _python_files() for line in unchecked_sites(p)
    ]
    pending = {(path, test) for path, _, test in sites} & set(PENDING)
    assert pending == set(PENDING), f"checked now, remove from PENDING: {sorted(set(PENDING) - pending)}"
    missing = [f"{path}:{line}" for path, line, test in sites if (path, test) not in PENDING]
    assert not missing, (
        f"{len(missing)} pytest.raises(UserError) site(s) check neither the location shown "
        "(tilelang.testing.assert_points_at(err, '<the user's line>')) nor say why not "
        "('# raised at the call: the traceback shows the user's line' or '# location: missing (reported)'):\n"
        + "\n".join(missing)
    )


def test_the_scan_finds_sites_and_marks(tmp_path):
    path = tmp_path / "test_sample.py"
    path.write_text(
        "import pytest\n"
        "from tilelang import errors\n"
        "from tilelang.errors import UserError as Wrong\n"
        "def test_a():\n"
        "    with pytest.raises(errors.UserError, match='x'):\n"  # 5: unchecked
        "        f()\n"
        "def test_b():\n"
        "    with pytest.raises(Wrong) as err:\n"  # 8: checked after the block
        "        f()\n"
        "    assert_points_at(err, 'T.copy(')\n"
        "def test_c():\n"
        "    with pytest.raises((KeyError, Wrong)):  # raised at the call: the traceback shows the user's line\n"
        "        f()\n"
        "def test_e():\n"
        "    # location: missing (reported)\n"
        "    with pytest.raises(UserError, match='a long pattern'):\n"  # marked on the line above
        "        f()\n"
        "def test_d():\n"
        "    pytest.raises(UserError, f, 1)\n"  # 19: unchecked plain call
        "    with pytest.raises(ValueError):\n"  # not a UserError site
        "        f()\n"
    )
    assert unchecked_sites(str(path)) == [5, 19]
