"""Allocations: shared tiles, register fragments, per-thread locals and scalar variables.

Scopes in the IR: `shared.dyn` (merged into one dynamic shared-memory block per kernel),
`local.fragment` (a block-level register tile spread over the threads by layout inference),
`local` (a private per-thread array, full size in every thread).
"""

from __future__ import annotations

import functools

from tvm import tirx
from tvm.script import tirx as _script
from tvm.script.ir_builder import tirx as _tb

from tilelang.dtypes import canonical
from tilelang.errors import UserError
from tilelang.utils.ir import dtype_of

SHARED = "shared.dyn"
FRAGMENT = "local.fragment"
LOCAL = "local"


def _shape(shape, what):
    dims = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
    for d in dims:
        if isinstance(d, int) and d <= 0:
            raise UserError(f"{what}: every dimension must be positive, got shape {dims}")
    return dims


def _tile_shape(shape, what):
    """A tile's shape: positive compile-time constants (tiles live in shared memory or registers,
    whose size is fixed when the kernel is compiled)."""
    dims = _shape(shape, what)
    for d in dims:
        if not isinstance(d, int) and not isinstance(d, tirx.IntImm):
            raise UserError(
                f"{what}: a tile's shape must be known at compile time, but dimension {d} of "
                f"{_fmt(dims)} is not a constant; tile a dynamic dimension with a fixed block size "
                f"(e.g. T.alloc_shared((block_M, block_K), ...) with T.Kernel(T.ceildiv(M, block_M), ...))"
            )
        if isinstance(d, tirx.IntImm) and d.value <= 0:
            raise UserError(f"{what}: every dimension must be positive, got shape {_fmt(dims)}")
    return dims


def _fmt(dims) -> str:
    return "(" + ", ".join(str(d) for d in dims) + ("," if len(dims) == 1 else "") + ")"


def alloc_shared(shape, dtype, scope=SHARED):
    """A tile in shared memory, visible to every thread of the block.

    Example: A_shared = T.alloc_shared((128, 32), "float16")
    """
    return _tb.alloc_buffer(_tile_shape(shape, "T.alloc_shared"), canonical(dtype), scope=scope)


def alloc_fragment(shape, dtype, scope=FRAGMENT):
    """A register tile of the whole block; which thread holds which element is inferred.
    `scope` may name another on-chip scope (what T.alloc_buffer takes), as TileLang allows.

    Example: C_local = T.alloc_fragment((128, 128), "float32")
    """
    return alloc_buffer(_tile_shape(shape, "T.alloc_fragment"), dtype, scope=scope, what="T.alloc_fragment")


def alloc_local(shape, dtype, scope=LOCAL):
    """A private array that every thread holds in full.

    Example: acc = T.alloc_local((8,), "float32")
    """
    return alloc_buffer(_tile_shape(shape, "T.alloc_local"), dtype, scope=scope, what="T.alloc_local")


# The scopes a kernel allocates in, and the T.alloc_* each stands for.
_SCOPES = {SHARED: "T.alloc_shared", "shared": "T.alloc_shared", FRAGMENT: "T.alloc_fragment", LOCAL: "T.alloc_local"}


def alloc_buffer(shape, dtype="float32", scope="global", *, what="T.alloc_buffer"):
    """A buffer in `scope`: "shared.dyn" or "shared" (T.alloc_shared), "local.fragment"
    (T.alloc_fragment), "local" (T.alloc_local), or "global" (T.alloc_global).

    Example: S = T.alloc_buffer((64, 64), "float16", scope="shared.dyn")
    """
    if scope == "global":
        return alloc_global(shape, dtype)
    if scope not in _SCOPES:
        raise UserError(f"{what}: scope must be one of {sorted(_SCOPES) + ['global']}, got {scope!r}")
    return _tb.alloc_buffer(_tile_shape(shape, _SCOPES[scope]), canonical(dtype), scope=scope)


def alloc_global(shape, dtype, scope="global"):
    """A scratch tensor in global memory for the kernels of this function (a workspace): allocated by
    the launcher before the first `T.Kernel` launches and freed after the last, on the stream they
    run on. Uninitialized. Call it before the kernels that use it; the kernels of one function can
    pass data through it (a split-K partial result, then its reduction).

    Memory comes from the caller's allocator when it provides one (torch's caching allocator when
    the kernel is called with torch tensors), else from the CUDA stream-ordered allocator.

    Errors: UserError if called inside `with T.Kernel(...)`, or `scope` is not "global".

    Example:
        glse = T.alloc_global([batch, heads, num_split], "float32")
        with T.Kernel(...):   # writes glse
            ...
        with T.Kernel(...):   # reads glse
            ...
    """
    from tilelang.language.kernel import _open_kernels

    dims = _shape(shape, "T.alloc_global")
    if scope != "global":
        raise UserError(f"T.alloc_global: scope must be 'global', got {scope!r} (use T.alloc_shared for shared memory)")
    if _open_kernels:
        raise UserError(
            f"T.alloc_global({_fmt(dims)}) inside `with T.Kernel(...)`: a global workspace belongs to the "
            "whole function (its kernels share it); allocate it before the first `with T.Kernel`"
        )
    return _tb.alloc_buffer(dims, canonical(dtype), scope="global")


def alloc_var(dtype, init=None):
    """A per-thread scalar variable; read it by name, assign it with `x = value`.

    Example:
        acc = T.alloc_var("float32", init=0)
        for k in T.serial(16):
            acc = acc + A[k]
    """
    wrapper = _tb.local_scalar(canonical(dtype))  # a 1-element local buffer, read as `x[0]`
    if init is not None:
        _tb.buffer_store(wrapper.scalar.source, init, [0])
    return wrapper


def Tensor(shape, dtype="float32", data=None):
    """The annotation of a kernel parameter: a global tensor of `shape` and `dtype`. With `data`
    (inside the kernel body), a view of another tensor's memory under a new shape and dtype.

    Example:
        def main(A: T.Tensor((M, K), "float16"), ...)
        kernel_flat = T.Tensor((KH * KW * C, F), dtype, kernel.data)   # kernel seen as 2-D
    """
    dims = tuple(_shape(shape, "T.Tensor"))
    if dtype is ptr:  # a table of device addresses (T.make_tensor reads tensors from them)
        dtype = "int64"
    if data is None:
        return _script.Buffer(dims, canonical(dtype))
    from tilelang.op.view import alias  # `X.data` of a buffer: a checked view of X (op/view.py)

    viewed = alias(data, dims, dtype, "T.Tensor")
    return viewed if viewed is not None else _tb.decl_buffer(dims, canonical(dtype), data=data)


class _Annotation:
    """A tensor annotation that is called, `T.Tensor((M, K), dtype)`, or subscripted,
    `T.Tensor[(M, K), dtype]` (a parameter annotation Python evaluates itself, outside the parser).
    A subscript of numbers only is the shape: `T.Tensor[M, K]` is `T.Tensor((M, K))`."""

    def __init__(self, fn):
        self._fn = fn
        functools.update_wrapper(self, fn)

    def __call__(self, *args, **kwargs):
        return self._fn(*args, **kwargs)

    def __getitem__(self, key):
        key = key if isinstance(key, tuple) else (key,)
        if not any(isinstance(k, (tuple, list, str)) for k in key):
            key = (key,)
        return self._fn(*key)


Tensor = _Annotation(Tensor)
Buffer = Tensor


def ptr(dtype=None, storage_scope="global"):
    """A pointer: as the dtype of a tensor, `T.Tensor([n], T.ptr)`, a table of device addresses
    (int64, e.g. `[t.data_ptr() for t in tensors]`) that `T.make_tensor` turns into tensors;
    called, a pointer-typed kernel parameter (`T.ptr("float16")`)."""
    return _script.handle(canonical(dtype) if dtype is not None else None, storage_scope)


def make_tensor(pointer, shape, dtype="float32", strides=None):
    """A global tensor of `shape` and `dtype` at `pointer`: a device address read from a
    `T.Tensor([n], T.ptr)` table (`A_ptrs[i]`), or a pointer parameter.

    Example:
        A = T.make_tensor(A_ptrs[batch], (M, K), T.float16)   # then T.copy(A[m0, k0], A_shared)
    """
    from tvm import ir

    dtype = canonical(dtype)
    dims = tuple(_shape(shape, "T.make_tensor"))
    if isinstance(pointer, ir.Var) and not tirx.is_buffer_var(pointer):
        data = pointer
    elif ir.is_prim_expr(pointer) and dtype_of(pointer) in ("int64", "uint64"):
        pointer_type = ir.PointerType(ir.PrimType(dtype), "global")
        data = _tb.Bind(tirx.reinterpret(pointer_type, pointer), pointer_type)
    else:
        raise UserError(
            f"T.make_tensor: expected a device address (an int64 element of a T.Tensor([n], T.ptr) table) "
            f"or a pointer parameter, got {pointer!r}"
        )
    if strides is None:  # spelled out: no TMA descriptor, which the host encodes, for a device address
        from tilelang.op.view import compact_strides

        strides = compact_strides(dims)
    return _tb.decl_buffer(dims, dtype, data=data, strides=strides)


def SharedBuffer(shape, dtype="float32"):
    """The annotation of a `T.macro` parameter that is a shared tile (documentation only: a macro
    is expanded where it is called, with the caller's buffers)."""
    return Tensor(shape, dtype)


SharedBuffer = _Annotation(SharedBuffer)
FragmentBuffer = SharedBuffer  # likewise, for a fragment parameter
LocalBuffer = SharedBuffer  # likewise, for a local buffer parameter
