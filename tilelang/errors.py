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


def describe_span(span) -> str:
    """'file:line' and the source line for an IR span, or '' when the node has no span."""
    if span is None:
        return ""
    source = getattr(span, "source_name", None)
    name = getattr(source, "name", None) if source is not None else None
    line = getattr(span, "line", 0)
    if not name or not line:
        return ""
    text = linecache.getline(str(name), int(line)).rstrip()
    where = f"  --> {name}:{line}"
    return f"{where}\n   | {text.strip()}" if text else where


def describe_function(fn) -> str:
    """'file:line' and the `def` line of a Python function (for errors about a kernel's signature)."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return ""
    line = code.co_firstlineno  # the first decorator's line; the signature follows the decorators
    for k in range(line, line + 50):
        text = linecache.getline(code.co_filename, k)
        if not text:
            break
        if text.lstrip().startswith(("def ", "async def ")):
            return f"  --> {code.co_filename}:{k}\n   | {text.strip()}"
    return f"  --> {code.co_filename}:{line}"


def at_span(message: str, *spans) -> UserError:
    """A UserError whose message ends with the source location of each given IR span."""
    locations = [d for d in (describe_span(s) for s in spans) if d]
    if locations:
        message = message + "\n" + "\n".join(locations)
    return UserError(message)


def tracing_location() -> str:
    """'file:line' and the source line of the kernel statement being traced (for warnings raised while
    TVM's parser evaluates it: errors get theirs from the parser), or '' outside tracing. The parser's
    frames hold the AST node they evaluate; the innermost one is the most precise."""
    frame = sys._getframe(1)
    while frame is not None:
        parser, node = frame.f_locals.get("self"), frame.f_locals.get("node")
        source = getattr(getattr(parser, "diag", None), "source", None)
        if source is not None and hasattr(source, "location") and hasattr(node, "lineno"):
            try:
                line = source.location(node)[0]
            except Exception:  # noqa: BLE001 - a node the source cannot place: look further out
                line = 0
            if line:
                text = linecache.getline(str(source.source_name), line).strip()
                return f"  --> {source.source_name}:{line}" + (f"\n   | {text}" if text else "")
        frame = frame.f_back
    return ""
