"""Errors a user sees: what is wrong in the kernel's terms, and the kernel source line it comes from.

`UserError` is a mistake in the user's kernel or call. Raised while the kernel is traced, the
parser attaches the kernel line itself; raised later (by a pass), `at_span` formats the location
from the IR node's span. `CompilerError` is a bug in tilelang: it names the pass.
"""

from __future__ import annotations

import linecache
import sys


class UserError(ValueError):
    """A mistake in the user's kernel; the message names buffers and shapes, and the kernel line."""


class CompilerError(RuntimeError):
    """An internal error of the compiler (not the user's fault); names the pass that failed."""


def format_location(filename: str, line: int, col: int = 0, end_col: int = 0) -> str:
    """A source location as every tilelang error shows it, the kernel parser's format:

         --> kernel.py:12:9
            |
         12 |         T.copy(A, s[0:32])
            |         ^^^^^^^^^^^^^^^^^^

    `col`/`end_col` (1-based, end exclusive) place the carets; without them they underline the
    statement. Only the location line when the file cannot be read."""
    text = linecache.getline(str(filename), int(line)).rstrip()
    if not text.strip():
        return f" --> {filename}:{line}" + (f":{col}" if col else "")
    if not col or col > len(text):
        col = len(text) - len(text.lstrip()) + 1  # the statement's first character
    where = f" --> {filename}:{line}:{col}"
    width = (end_col - col) if end_col > col else len(text) - col + 1
    pad = " " * len(str(line))
    return f"{where}\n{pad} |\n{line} | {text}\n{pad} | {' ' * (col - 1)}{'^' * max(1, width)}"


def describe_span(span) -> str:
    """The location of an IR span (`format_location`), or '' when the node has none."""
    if span is None:
        return ""
    source = getattr(span, "source_name", None)
    name = getattr(source, "name", None) if source is not None else None
    line = getattr(span, "line", 0)
    if not name or not line:
        return ""
    end_col = getattr(span, "end_column", 0) if getattr(span, "end_line", line) == line else 0
    return format_location(str(name), int(line), int(getattr(span, "column", 0) or 0), int(end_col or 0))


def describe_function(fn) -> str:
    """The location of a Python function's `def` line (for errors about a kernel's signature)."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return ""
    line = code.co_firstlineno  # the first decorator's line; the signature follows the decorators
    for k in range(line, line + 50):
        text = linecache.getline(code.co_filename, k)
        if not text:
            break
        if text.lstrip().startswith(("def ", "async def ")):
            return format_location(code.co_filename, k)
    return format_location(code.co_filename, line)


def at_span(message: str, *spans) -> UserError:
    """A UserError whose message ends with the source location of each given IR span."""
    locations = [d for d in (describe_span(s) for s in spans) if d]
    if locations:
        message = message + "\n" + "\n".join(locations)
    return UserError(message)


def tracing_location() -> str:
    """The location (`format_location`) of the kernel statement being traced (for warnings raised while
    TVM's parser evaluates it: errors get theirs from the parser), or '' outside tracing. The parser's
    frames hold the AST node they evaluate; the innermost one is the most precise."""
    frame = sys._getframe(1)
    while frame is not None:
        parser, node = frame.f_locals.get("self"), frame.f_locals.get("node")
        source = getattr(getattr(parser, "diag", None), "source", None)
        if source is not None and hasattr(source, "location") and hasattr(node, "lineno"):
            try:
                line, col, end_line, end_col = source.location(node)
            except Exception:  # noqa: BLE001 - a node the source cannot place: look further out
                line = 0
            if line:
                return format_location(str(source.source_name), line, col, end_col if end_line == line else 0)
        frame = frame.f_back
    return ""
