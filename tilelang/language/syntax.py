"""Two pieces of Python syntax that TVM's TVMScript parser lacks or gets wrong in a kernel, given
TileLang's meaning. Registered in the parser's tables (`tvm.script.parser.core.dispatch`) when
`tilelang.language` is imported; `prim_func.py` runs the parser.

1. Tuple assignment to buffer elements and scalar variables, `a[0], a[1] = a[1], a[0]`: TVM's
   parser refuses any target but names ("Invalid type in assign statement"), and with names only
   it binds new variables instead of storing into the existing ones. As in Python (and TileLang),
   every right-hand side is evaluated first, then the targets are assigned from left to right: a
   value that reads memory is bound to an immutable variable before the first store, so a swap
   swaps. A tuple of new names only (`bx, by = ...`) stays TVM's.

       nz[0], nz[1] = nz[1], nz[0]    ->    v = nz[1]; v_1 = nz[0]; nz[0] = v; nz[1] = v_1

2. A comparison of a bfloat16, float8, float6 or float4 value with a Python number,
   `x[i] != 0`: TVM's parser converts the number only for IEEE float types and then fails with
   "'int' object has no attribute 'expr_ty'". The number becomes a constant of the value's
   element type, as for float16 and as `x[i] + 1` already does.
"""

from __future__ import annotations

import itertools

import tvm
from tvm import ir, tirx
from tvm.script.ir_builder import tirx as _tb
from tvm.script.parser.core import dispatch, doc

from tilelang.errors import UserError

# ---- 1. tuple assignment ---------------------------------------------------------------------------

_tvm_assign = dispatch.get(token="tirx", type_name="Assign")
_names = itertools.count()


def _leaves(target) -> list:
    """The targets of a (nested) tuple target, left to right."""
    if isinstance(target, (doc.Tuple, doc.List)):
        return [leaf for elt in target.elts for leaf in _leaves(elt)]
    return [target]


def _is_variable(parser, name: doc.Name) -> bool:
    """Whether `name` is an existing scalar variable (T.alloc_var, `x = value`): a store target."""
    value = parser.var_table.get().get(name.id)
    if isinstance(value, _tb.scalar_wrapper):
        return True
    buf = value.source if isinstance(value, ir.TensorLoad) else value
    return tirx.is_buffer_var(buf) and len(buf.shape) == 1 and bool(buf.shape[0] == 1)


def _stores(parser, target) -> bool:
    """Whether a tuple target stores into memory (an element, a scalar variable) somewhere."""
    return any(
        isinstance(leaf, doc.Subscript) or (isinstance(leaf, doc.Name) and _is_variable(parser, leaf))
        for leaf in _leaves(target)
    )


def _unpack(parser, target, value) -> list:
    """[(leaf target, its value)] for `target = value`, as Python unpacks."""
    if not isinstance(target, (doc.Tuple, doc.List)):
        return [(target, value)]
    if any(isinstance(elt, doc.Starred) for elt in target.elts):
        parser.report_error(target, "a starred target (`a, *b = ...`) is not supported with stores")
    if isinstance(value, ir.TensorLoad) or not isinstance(value, (tuple, list)):
        parser.report_error(target, f"cannot unpack {type(value).__name__} into {len(target.elts)} targets")
    if len(value) != len(target.elts):
        parser.report_error(target, f"{len(target.elts)} targets for {len(value)} values")
    return [pair for elt, v in zip(target.elts, value) for pair in _unpack(parser, elt, v)]


def _evaluated(value):
    """`value` as it is now: an expression that may read memory is bound to a new variable here,
    before any target of the assignment is stored."""
    if isinstance(value, _tb.scalar_wrapper):
        value = value.scalar
    if not tvm.ir.is_prim_expr(value) or isinstance(value, (tirx.IntImm, tirx.FloatImm, ir.Var)):
        return value
    return _tb.Bind(value, var=tirx.Var("rhs", value.ty))


def _assign_tuple(parser, node: doc.Assign) -> None:
    target = node.targets[0]
    pairs = _unpack(parser, target, parser.eval_expr(node.value))
    pairs = [(leaf, _evaluated(v)) for leaf, v in pairs]
    for leaf, value in pairs:
        # Each target is assigned as `leaf = value` would be (TVM's single assignment: stores into
        # elements and scalar variables, new names bound), the value under a name no kernel uses.
        name = f"__tl_tuple_value_{next(_names)}"
        parser.var_table.add(name, value, allow_shadowing=True)
        load = doc.Name(id=name, ctx=doc.Load(), **_position(leaf))
        _tvm_assign(parser, doc.Assign(targets=[leaf], value=load, **_position(leaf)))


def _position(node) -> dict:
    keys = ("lineno", "col_offset", "end_lineno", "end_col_offset")
    return {k: getattr(node, k) for k in keys}


@dispatch.register(token="tirx", type_name="Assign")
def _visit_assign(parser, node: doc.Assign) -> None:
    target = node.targets[0] if len(node.targets) == 1 else None
    if isinstance(target, (doc.Tuple, doc.List)) and _stores(parser, target):
        _assign_tuple(parser, node)
        return
    _tvm_assign(parser, node)


# ---- 2. comparisons with Python numbers --------------------------------------------------------------

# Element types TVM's parser does not treat as floats (its type code is not kFloat).
_OTHER_FLOATS = ("bfloat", "float8", "float6", "float4")
_COMPARISONS = (doc.Eq, doc.NotEq, doc.Lt, doc.LtE, doc.Gt, doc.GtE)


def _number_as(number, other):
    """`number` (a Python int or float) as a constant of `other`'s element type when that is one
    of `_OTHER_FLOATS`, else unchanged."""
    if isinstance(number, bool) or not isinstance(number, (int, float)) or not tvm.ir.is_prim_expr(other):
        return number
    element = str(tvm.DataType(str(other.ty.dtype)).with_lanes(1)) if hasattr(other, "ty") else ""
    if not element.startswith(_OTHER_FLOATS):
        return number
    try:
        return tirx.const(number, element)
    except Exception as err:  # noqa: BLE001 (TVM's message is the reason)
        raise UserError(f"{number!r} is not a {element} value: {err}") from None


def _comparison(tvm_op):
    def compare(a, b):
        return tvm_op(_number_as(a, b), _number_as(b, a))

    return compare


for _op in _COMPARISONS:
    for _side in (0, 1):
        _original = dispatch.get_op(operand_type=tirx.Expr, op_node_type=_op, operand_index=_side)
        dispatch.register_op(tirx.Expr, _op, _side)(_comparison(_original))
