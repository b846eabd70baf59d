"""The eager kernel form: `@tilelang.jit` on the kernel body itself, `T.const` sizes and `T.empty` outputs.

    @tilelang.jit
    def matmul(A, B, block_M, block_N, block_K, dtype="float16"):
        M, N, K = T.const("M, N, K")          # sizes read from the tensors at call time
        A: T.Tensor((M, K), dtype)            # A and B are tensor parameters
        B: T.Tensor((K, N), dtype)
        C = T.empty((M, N), dtype)            # an output the kernel allocates and returns
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
            ...
        return C

How such a function becomes a kernel (the jit layer, `tilelang/jit/eager.py`, calls this module):

- Its body is split where the kernel starts: the *prologue* is the leading run of plain Python
  statements (sizes, tensor declarations, `T.empty`, assertions on the compile-time arguments);
  the *kernel* is everything from the first statement that builds IR (a `with T.Kernel`, a macro
  call) up to the final `return` of the outputs.
- The prologue runs as ordinary Python (compiled once from the user's source, same file and line
  numbers, same globals and closure), with each `A: T.Tensor(...)` rewritten to record A's
  declaration. Run with symbolic `T.const` sizes it tells which tensor dimension each size comes
  from; run with the sizes read from a call's tensors it gives the concrete parameter types.
- The kernel statements are parsed by TVM's TVMScript parser as the body of a `@T.prim_func` whose
  parameters are the declared tensors followed by the returned outputs, with the prologue's names
  in scope; the source locations are the user's, so errors point at the user's lines.

Parameters annotated with a scalar type (`n: T.int32`, `M: int`) are compile-time values here:
one kernel per value (the public TileLang passes them at run time; our kernels take tensors only).
"""

from __future__ import annotations

import ast
import copy
import inspect
import keyword
import re
import sys
import textwrap
import threading
from dataclasses import dataclass, field

import tvm
from tvm import tirx
from tvm.script.parser.core import doc
from tvm.script.parser.core.diagnostics import Source

from tilelang.dtypes import canonical
from tilelang.errors import UserError, describe_function
from tilelang.language.allocate import Tensor
from tilelang.language.prim_func import finish_parse, prim_func

# Annotation names that make a parameter a tensor (the last attribute: `T.Tensor`, `T.Buffer`, ...).
_TENSOR_ANNOTATIONS = {"Tensor", "Buffer", "StridedTensor", "SharedBuffer", "FragmentBuffer", "LocalBuffer"}
_CONST_DTYPES = ("int32", "int64")
# ast.FunctionDef's field for generic functions (Python 3.12 and later).
_NO_TYPE_PARAMS = {"type_params": []} if sys.version_info >= (3, 12) else {}


# ---- T.const and T.empty ---------------------------------------------------------------------------


@dataclass
class _Trace:
    """One run of a prologue: the sizes given (None: symbolic) and what the run declared."""

    values: dict | None
    symbols: list = field(default_factory=list)  # the Vars T.const made, in order
    declared: dict = field(default_factory=dict)  # parameter name -> Buffer


_current = threading.local()


def _trace() -> _Trace | None:
    return getattr(_current, "trace", None)


def const(names: str, dtype="int32"):
    """Sizes of a kernel's tensors, read from the tensors it is called with (eager kernels only).

    Args:
        names: one name ("M") or several separated by commas or spaces ("M, N, K").
        dtype: "int32" (default) or "int64".

    Returns:
        One size, or a tuple of sizes for several names. While the kernel is compiled for a call
        they are Python ints (each call with new sizes compiles a kernel for them, cached per sizes).

    Errors:
        UserError outside a kernel decorated with `@tilelang.jit` on its body, for a name that is
        not an identifier, or a size no declared tensor has as a whole dimension.

    Example:
        @tilelang.jit
        def add(A, B):
            M, N = T.const("M, N")
            A: T.Tensor((M, N), "float32")
            B: T.Tensor((M, N), "float32")
            ...
    """
    trace = _trace()
    if trace is None:
        raise UserError(
            f"T.const({names!r}) declares sizes read from the tensors of an eager kernel (a function with "
            "@tilelang.jit directly on its body and tensors declared as `A: T.Tensor((M, K), dtype)`); "
            "elsewhere use a Python int, or T.dynamic for a size known only at run time"
        )
    if not isinstance(names, str):
        raise UserError(f"T.const: the names must be a string such as 'M, N', got {names!r}")
    dtype = canonical(dtype)
    if dtype not in _CONST_DTYPES:
        raise UserError(f"T.const({names!r}): dtype must be int32 or int64, got {dtype}")
    split = [n for n in re.split(r"[\s,]+", names.strip()) if n]
    if not split:
        raise UserError("T.const: no name given; write T.const('M') or T.const('M, N')")
    out = []
    for name in split:
        if not name.isidentifier() or keyword.iskeyword(name):
            raise UserError(f"T.const: '{name}' is not a valid size name; use an identifier such as 'M'")
        if trace.values is not None:
            if name not in trace.values:
                raise UserError(f"T.const: no value for the size '{name}'; pass a tensor that has it or {name}=<int>")
            out.append(trace.values[name])
        else:
            var = tirx.Var(name, dtype)
            trace.symbols.append(var)
            out.append(var)
    return out[0] if len(out) == 1 else tuple(out)


@dataclass(frozen=True)
class OutputTensor:
    """What `T.empty` returns: an output of an eager kernel, allocated by the call and returned."""

    shape: tuple
    dtype: str

    @property
    def ndim(self) -> int:
        return len(self.shape)


def empty(*shape, dtype="float32"):
    """An output tensor of an eager kernel: the call allocates it and returns it (`return C`).

    Accepted forms (as in TileLang): `T.empty((M, N), dtype)`, `T.empty((M, N), dtype=dtype)`,
    `T.empty(M, N, dtype=dtype)`.

    Errors:
        UserError for a shape that is not a tuple/list of sizes, or outside an eager kernel.

    Example:
        C = T.empty((M, N), "float16")
        with T.Kernel(...):
            ...
        return C
    """
    if _trace() is None:
        raise UserError(
            "T.empty declares an output of an eager kernel (a function with @tilelang.jit directly on its body, "
            "before its `with T.Kernel`); in a @T.prim_func, make the output a parameter and name it in out_idx"
        )
    if len(shape) == 2 and isinstance(shape[0], (tuple, list)) and not isinstance(shape[1], (tuple, list)):
        shape, dtype = tuple(shape[0]), shape[1]
    elif len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    if not shape or not all(isinstance(d, int) or tvm.ir.is_prim_expr(d) for d in shape):
        raise UserError(f"T.empty: expected a shape such as (M, N) and a dtype, got {shape!r}")
    return OutputTensor(tuple(shape), canonical(dtype))


class _Runtime:
    """The helpers a rewritten prologue calls (bound as `__tl_rt`)."""

    @staticmethod
    def declare(name, annotation, current):
        """`name: annotation` in a prologue: a tensor declaration, or a scalar type (a no-op here)."""
        trace = _trace()
        if isinstance(annotation, tirx.Buffer):
            if trace is not None:
                trace.declared[name] = annotation
            return annotation
        return current  # `n: T.int32`: n stays the compile-time value it was called with

    @staticmethod
    def index(annotation, key):
        """`T.Tensor[(M, K), dtype]`: the subscript form of an annotation, also where it is a function."""
        if hasattr(annotation, "__getitem__") or hasattr(annotation, "__class_getitem__"):
            return annotation[key]
        return annotation(*key) if isinstance(key, tuple) else annotation(key)


# ---- reading an eager function -------------------------------------------------------------------


def _attr_name(node) -> str | None:
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return None


def _is_tensor_annotation(node) -> bool:
    head = node.value if isinstance(node, ast.Subscript) else node.func if isinstance(node, ast.Call) else node
    return _attr_name(head) in _TENSOR_ANNOTATIONS


def _is_call_to(node, name: str) -> bool:
    return isinstance(node, ast.Call) and _attr_name(node.func) == name


def _walk_statements(stmts):
    """Every statement under `stmts`, not entering nested functions or classes."""
    for s in stmts:
        yield s
        if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        for name in ("body", "orelse", "finalbody"):
            yield from _walk_statements(getattr(s, name, []) or [])
        for handler in getattr(s, "handlers", []) or []:
            yield from _walk_statements(handler.body)


def _builds_ir(stmt) -> bool:
    """Whether a top-level statement starts the kernel: a `with` (T.Kernel), or a bare call (a macro)."""
    for s in _walk_statements([stmt]):
        if isinstance(s, (ast.With, ast.AsyncWith)):
            return True
        if isinstance(s, ast.Expr) and isinstance(s.value, ast.Call) and _attr_name(s.value.func) != "print":
            return True
    return False


def _is_declaration(stmt) -> bool:
    """`A: T.Tensor(...)` (a tensor parameter) or `C = T.empty(...)` (an output)."""
    if isinstance(stmt, ast.AnnAssign):
        return stmt.value is None and _is_tensor_annotation(stmt.annotation)
    return isinstance(stmt, ast.Assign) and _is_call_to(stmt.value, "empty")


def has_nested_prim_func(fn) -> bool:
    """Whether `fn` defines a `@T.prim_func` inside (the lazy form: a factory returning a kernel)."""
    tree = _function_ast(fn)[1]
    for node in ast.walk(tree):
        if node is not tree and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for dec in node.decorator_list:
                target = dec.func if isinstance(dec, ast.Call) else dec
                if _attr_name(target) == "prim_func":
                    return True
    return False


def looks_eager(fn) -> bool:
    """Whether `fn` is a kernel body (the eager form) rather than a factory returning a `@T.prim_func`."""
    try:
        _, tree = _function_ast(fn)
    except (OSError, TypeError, SyntaxError, UserError):
        return False  # no source of its own (an interactive session, a lambda): only the lazy form can work
    if has_nested_prim_func(fn):
        return False
    for s in _walk_statements(tree.body):
        if _is_declaration(s) or (isinstance(s, ast.Assign) and _is_call_to(s.value, "const")):
            return True
    if any(isinstance(s, (ast.With, ast.AsyncWith)) for s in tree.body):
        return True
    return any(isinstance(a, tirx.Buffer) for a in _signature_annotations(fn).values())


def _function_ast(fn):
    """The dedented source of `fn` (decorators included) and its FunctionDef."""
    lines, _ = inspect.getsourcelines(fn)
    source = textwrap.dedent("".join(lines))
    tree = ast.parse(source)
    node = tree.body[0]
    if not isinstance(node, ast.FunctionDef):
        raise UserError(f"@tilelang.jit expects a function, got {ast.dump(node)[:80]}")
    return source, node


def _signature_annotations(fn) -> dict:
    """The parameter annotations of `fn`, evaluated (string annotations in its globals and closure)."""
    out = {}
    for name, value in (getattr(fn, "__annotations__", None) or {}).items():
        if name == "return":
            continue
        if isinstance(value, str):
            try:
                value = eval(value, {**fn.__globals__, **_closure_values(fn)})  # noqa: S307
            except Exception:  # noqa: BLE001 (an annotation that is only documentation)
                continue
        out[name] = value
    return out


def _closure_values(fn) -> dict:
    values = {}
    for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
        try:
            values[name] = cell.cell_contents
        except ValueError:  # a cell not yet assigned
            pass
    return values


class _RewritePrologue(ast.NodeTransformer):
    """`A: ann` -> `A = __tl_rt.declare("A", ann, A)`; `X[k]` annotations -> `__tl_rt.index(X, k)`."""

    def __init__(self, params):
        self.params = params

    def visit_AnnAssign(self, node):
        if node.value is not None or not isinstance(node.target, ast.Name):
            return node
        name = node.target.id
        annotation = node.annotation
        if isinstance(annotation, ast.Subscript):
            annotation = _call("index", [annotation.value, annotation.slice], annotation)
        current = ast.Name(id=name, ctx=ast.Load()) if name in self.params else ast.Constant(None)
        call = _call("declare", [ast.Constant(name), annotation, current], node)
        return ast.copy_location(ast.Assign(targets=[ast.Name(id=name, ctx=ast.Store())], value=call), node)

    def visit_FunctionDef(self, node):
        return node  # nested functions keep their own annotations

    visit_AsyncFunctionDef = visit_FunctionDef
    visit_ClassDef = visit_FunctionDef


def _call(method: str, args, where):
    func = ast.Attribute(value=ast.Name(id="__tl_rt", ctx=ast.Load()), attr=method, ctx=ast.Load())
    return ast.copy_location(ast.Call(func=func, args=args, keywords=[]), where)


@dataclass
class Specialization:
    """An eager kernel's parameters for some compile-time arguments (one prologue run)."""

    inputs: list  # [(name, Buffer)] in signature order
    outputs: list  # [(name, OutputTensor)] in return order
    sizes: dict  # T.const name -> (input name, dimension) it is read from, or None (pass name=<int>)
    namespace: dict  # the prologue's names after the run


class EagerFunction:
    """A function written in the eager form, read once: its parameters, prologue and kernel statements."""

    def __init__(self, fn):
        self.fn = fn
        self.name = fn.__name__
        self.signature = inspect.signature(fn)
        self.where = describe_function(fn)
        for p in self.signature.parameters.values():
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD, p.POSITIONAL_ONLY):
                raise UserError(
                    f"@tilelang.jit kernel '{self.name}': parameter '{p.name}' cannot be *args, **kwargs or "
                    f"positional-only in an eager kernel; name each parameter\n{self.where}"
                )
        self.source, self.node = _function_ast(fn)
        body = list(self.node.body)
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            body = body[1:]  # the docstring
        # The kernel starts at the first statement building IR after the last declaration.
        declares = [
            k for k, s in enumerate(body) if not _builds_ir(s) and any(map(_is_declaration, _walk_statements([s])))
        ]
        after = declares[-1] + 1 if declares else 0
        start = next((k for k in range(after, len(body)) if _builds_ir(body[k])), len(body))
        self.prologue, kernel = body[:start], body[start:]
        self.returned, self.return_node = [], None
        if kernel and isinstance(kernel[-1], ast.Return):
            self.return_node = kernel[-1]
            self.returned = self._returned_names(kernel[-1])
            kernel = kernel[:-1]
        self.kernel = kernel
        self._check_placement()
        annotations = _signature_annotations(fn)
        declared = {
            s.target.id
            for s in _walk_statements(self.prologue)
            if isinstance(s, ast.AnnAssign) and s.value is None and isinstance(s.target, ast.Name)
            if _is_tensor_annotation(s.annotation)
        }
        params = list(self.signature.parameters)
        self.signature_tensors = {n: a for n, a in annotations.items() if isinstance(a, tirx.Buffer)}
        self.tensor_params = [n for n in params if n in declared or n in self.signature_tensors]
        self._prologue_fn = self._compile_prologue(params)

    def _returned_names(self, ret) -> list[str]:
        value = ret.value
        items = [] if value is None else value.elts if isinstance(value, ast.Tuple) else [value]
        if not all(isinstance(v, ast.Name) for v in items):
            raise self._error(ret, "an eager kernel returns the tensors it made with T.empty, by name (`return C`)")
        return [v.id for v in items]

    def _check_placement(self):
        for s in _walk_statements(self.prologue + self.kernel):
            if isinstance(s, ast.Return):
                raise self._error(s, "an eager kernel returns its T.empty outputs once, as its last statement")
        for s in _walk_statements(self.kernel):
            if _is_declaration(s):
                raise self._error(s, "tensors and T.empty outputs are declared before the kernel (`with T.Kernel`)")

    def _assignment_of(self, name: str):
        """The first prologue statement assigning `name` (`B = T.empty(...)`, `M = T.const("M")`), or None."""
        for st in _walk_statements(self.prologue):
            if isinstance(st, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in st.targets):
                return st
        return None

    def _declaration_naming(self, name: str):
        """The first tensor declaration of the prologue whose annotation names `name`, or None."""
        for st in _walk_statements(self.prologue):
            if isinstance(st, ast.AnnAssign) and _is_tensor_annotation(st.annotation):
                if any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(st.annotation)):
                    return st
        return None

    def _error(self, node, message) -> UserError:
        """A UserError at `node`'s line of the user's function, or at the function (`node` None)."""
        if node is None:
            return UserError(f"{self.name}: {message}\n{self.where}")
        line = self.fn.__code__.co_firstlineno + node.lineno - 1
        text = self.source.splitlines()[node.lineno - 1].strip()
        return UserError(f"{self.name}: {message}\n  --> {self.fn.__code__.co_filename}:{line}\n   | {text}")

    def _compile_prologue(self, params):
        """The prologue as a Python function of the parameters returning its locals (same file, lines)."""
        rewritten = _RewritePrologue(set(params))
        stmts = [rewritten.visit(copy.deepcopy(s)) for s in self.prologue]  # self.prologue keeps its lines
        ret = ast.Return(value=ast.Call(func=ast.Name(id="locals", ctx=ast.Load()), args=[], keywords=[]))
        inner = ast.FunctionDef(
            name=self.name,
            args=_plain_args(params),
            body=[*stmts, ret],
            decorator_list=[],
            returns=None,
            **_NO_TYPE_PARAMS,
        )
        free = list(self.fn.__code__.co_freevars)
        outer = ast.FunctionDef(
            name="__tl_make",
            args=_plain_args(["__tl_rt", *free]),
            body=[inner, ast.Return(value=ast.Name(id=self.name, ctx=ast.Load()))],
            decorator_list=[],
            returns=None,
            **_NO_TYPE_PARAMS,
        )
        for node in (inner, outer, ret):
            ast.copy_location(node, self.node)
        module = ast.fix_missing_locations(ast.Module(body=[outer], type_ignores=[]))
        ast.increment_lineno(module, self.fn.__code__.co_firstlineno - 1)
        code = compile(module, self.fn.__code__.co_filename, "exec")
        scope = {}
        exec(code, self.fn.__globals__, scope)  # noqa: S102 (the user's own code, recompiled)
        self._free = free
        return scope["__tl_make"]

    # ---- running it ---------------------------------------------------------------------------------

    def run_prologue(self, arguments: dict, sizes: dict | None) -> _Trace:
        """Run the prologue with `arguments` (every parameter; tensors as placeholders) and `sizes`
        (T.const values, or None for symbolic sizes); returns the trace with its namespace."""
        closure = _closure_values(self.fn)
        make = self._prologue_fn(_Runtime, *(closure.get(n) for n in self._free))
        trace = _Trace(values=sizes)
        args = {n: self.signature_tensors.get(n) if n in self.tensor_params else v for n, v in arguments.items()}
        previous, _current.trace = _trace(), trace
        try:
            trace.namespace = make(**args)
        finally:
            _current.trace = previous
        for name, annotation in self.signature_tensors.items():
            trace.declared.setdefault(name, annotation)
        return trace

    def specialize(self, arguments: dict, sizes: dict | None) -> Specialization:
        """Run the prologue and collect the tensors it declared, the outputs and where each size comes from."""
        trace = self.run_prologue(arguments, sizes)
        ns = trace.namespace
        inputs = []
        for name in self.tensor_params:
            buf = trace.declared.get(name)
            if buf is None:
                raise self._error(None, f"parameter '{name}' is never declared as a tensor")
            inputs.append((name, buf))
        outputs = []
        for name in self.returned:
            value = ns.get(name)
            if not isinstance(value, OutputTensor):
                raise self._error(
                    self.return_node,
                    f"returns '{name}', which is not a tensor made by T.empty; an eager kernel returns its "
                    f"outputs (C = T.empty((M, N), dtype) ... return C)",
                )
            outputs.append((name, value))
        made = [n for n, v in ns.items() if isinstance(v, OutputTensor)]
        missing = [n for n in made if n not in self.returned]
        if missing:
            raise self._error(
                self._assignment_of(missing[0]),
                f"the T.empty outputs {missing} are not returned; end the kernel with `return {', '.join(made)}`",
            )
        return Specialization(inputs, outputs, self._size_sources(trace, inputs, outputs), ns)

    def _size_sources(self, trace, inputs, outputs) -> dict:
        if trace.values is not None:
            return {}
        sources = {}
        for var in trace.symbols:
            found = [(n, d) for n, buf in inputs for d, s in enumerate(buf.shape) if s.same_as(var)]
            if found:
                sources[var.name] = found[0]
                continue
            if any(tvm.ir.is_prim_expr(s) and s.same_as(var) for _, out in outputs for s in out.shape):
                sources[var.name] = None
                continue
            shapes = ", ".join(f"{n}: {list(buf.shape)}" for n, buf in inputs)
            message = (
                f"the size '{var.name}' (T.const) is not a whole dimension of any declared tensor ({shapes}), so "
                f"no call can give its value; use it directly as a dimension (M, not M * 2), or make it a parameter"
            )
            # The first declaration using it (inside an expression), else where it is made.
            names = [n for n, v in trace.namespace.items() if isinstance(v, tirx.Var) and v.same_as(var)]
            places = [self._declaration_naming(n) for n in names] + [self._assignment_of(n) for n in names]
            raise self._error(next((st for st in places if st is not None), None), message)
        return sources

    def prim_func(self, arguments: dict, sizes: dict):
        """The kernel for concrete sizes: the prologue run with them, then the kernel statements parsed."""
        spec = self.specialize(arguments, sizes)
        names = [n for n, _ in spec.inputs] + [n for n, _ in spec.outputs]
        extra = {**self.fn.__globals__, **_closure_values(self.fn)}
        extra.update({k: v for k, v in spec.namespace.items() if k not in names})
        extra["__tl_prim_func"] = prim_func
        for name, buf in spec.inputs:
            extra[f"__tl_param_{name}"] = buf
        for name, out in spec.outputs:
            extra[f"__tl_param_{name}"] = Tensor(out.shape, out.dtype)
        source = _KernelSource(self, names)
        return finish_parse(lambda: _parse(source, extra), self.where)


def _plain_args(names) -> ast.arguments:
    return ast.arguments(
        posonlyargs=[],
        args=[ast.arg(arg=n) for n in names],
        vararg=None,
        kwonlyargs=[],
        kw_defaults=[],
        kwarg=None,
        defaults=[],
    )


class _KernelSource(Source):
    """The user's function as TVMScript sees it: a `@T.prim_func` of the declared tensors whose body
    is the kernel statements, at their original lines (errors show the user's file and lines)."""

    def __init__(self, eager: EagerFunction, params: list[str]):
        super().__init__(eager.fn)
        node = eager.node
        args = _plain_args([])
        args.args = [
            ast.copy_location(ast.arg(arg=n, annotation=ast.Name(id=f"__tl_param_{n}", ctx=ast.Load())), node)
            for n in params
        ]
        fdef = ast.FunctionDef(
            name=node.name,
            args=args,
            body=list(eager.kernel) or [ast.copy_location(ast.Pass(), node)],
            decorator_list=[ast.copy_location(ast.Name(id="__tl_prim_func", ctx=ast.Load()), node)],
            returns=None,
            **_NO_TYPE_PARAMS,
        )
        ast.copy_location(fdef, node)
        module = ast.fix_missing_locations(ast.Module(body=[fdef], type_ignores=[]))
        self._doc = doc.to_doc(module)

    def as_ast(self):
        return self._doc


def _parse(source, extra_vars):
    """TVM's TVMScript parser on `source` (what `tvm.script.parser.core.entry.parse` does for a
    function, from a prepared source), with the well-formedness check."""
    from tvm.script.ir_builder import IRBuilder
    from tvm.script.parser.core.error import ParserError
    from tvm.script.parser.core.parser import Parser

    parser = Parser(source, {})
    with IRBuilder() as builder:
        try:
            parser.parse(extra_vars=extra_vars)
        except ParserError as err:
            parser.report_error(err.node, err.args[0])
    func = builder.get()
    try:
        tvm.s_tir.analysis.verify_well_formed(tvm.IRModule.from_expr(func))
        tvm.tirx.analysis.verify_tirx_well_formed(func)
    except Exception as err:  # noqa: BLE001 (reported at the function, as TVM's parser does)
        parser.report_error(source.as_ast(), err=f"the kernel is not well formed: {err}")
    return func
