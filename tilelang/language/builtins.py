"""Low-level language names: scalar helpers, raw pointers, device calls, block-level sync.

These are TileLang's names for things kernels write between tile ops: `T.clamp`, `T.shift_left`,
`T.assume`, `T.device_assert`, `T.index_to_coordinates`, pointers to buffer elements for extern
device functions (`T.access_ptr`, `T.import_source`, `T.call_extern`), hand-written cp.async
(`T.ptx_cp_async`, `T.ptx_commit_group`, `T.ptx_wait_group`), `T.dp4a`, `T.sync_threads` and
`T.parallel`. Each builds plain TIR (device calls of `tl_templates/cuda` functions or CUDA
built-ins) that TVM's code generator prints as it is.
"""

from __future__ import annotations

import builtins
import math

from tvm import ir, tirx
from tvm.script import tirx as _script
from tvm.script.ir_builder import tirx as _tb
from tvm.tirx import shift_left, shift_right  # noqa: F401  (TileLang re-exports TVM's)

from tilelang import intrinsics
from tilelang.dtypes import bits as dtype_bits
from tilelang.errors import UserError
from tilelang.utils.ir import dtype_of

# TVM's names TileLang kernels use as they are: an attribute scope around statements
# (`with T.attr(node, key, value):`), and a reduction across threads (`T.comm_reducer`,
# `T.tvm_thread_allreduce`, inside `T.attr(reducer, "reduce_scope", ...)`), warp shuffles.
attr = _tb.attr
comm_reducer = _script.comm_reducer
tvm_thread_allreduce = _script.tvm_thread_allreduce
tvm_warp_shuffle = _script.tvm_warp_shuffle
tvm_warp_shuffle_up = _script.tvm_warp_shuffle_up
tvm_warp_shuffle_down = _script.tvm_warp_shuffle_down


def _extern(name, *args, dtype="void"):
    return tirx.call_extern(dtype, name, *args)


def clamp(value, min_val, max_val):
    """`value` limited to [min_val, max_val]: `T.min(T.max(value, min_val), max_val)`.

    Example: y[i, j] = T.clamp(x[i, j] / scale[i], fp8_min, fp8_max)
    """
    return _script.min(_script.max(value, min_val), max_val)


def assume(cond):
    """Tell the compiler `cond` holds where this runs (a hint, never checked). It becomes
    CUDA's `__builtin_assume(cond)`, which nvcc uses to simplify the code after it.

    Example: T.assume(cta_id < 2)
    """
    if isinstance(cond, builtins.bool):
        cond = tirx.const(cond, "bool")
    if not ir.is_prim_expr(cond) or dtype_of(cond) != "bool":
        raise UserError(f"T.assume takes a condition such as `i < n`, got {cond!r}")
    return _extern("__builtin_assume", cond)


def index_to_coordinates(index, shape) -> list:
    """The coordinates of flat (row-major) `index` in a tensor of `shape`, outermost first.

    Example: i, j = T.index_to_coordinates(tx * 4 + v, (64, 32))   # i = idx // 32, j = idx % 32
    """
    coords = []
    for extent in reversed(list(shape)):
        coords.append(index % extent)
        index = index // extent
    return coords[::-1]


def device_assert(condition, msg: str = "", no_stack_info: bool = False):
    """Check `condition` on the GPU: a thread that finds it false prints `msg` and stops the kernel
    (`__trap()`: the launch fails with an error). Costs a branch per check; for debugging.

    Example: T.device_assert(nz_count <= elem, "more nonzeros than expected in a group")
    """
    del no_stack_info  # TileLang's option to leave its source location out of the message
    if isinstance(condition, builtins.bool):
        condition = tirx.const(condition, "bool")
    text = "tilelang device_assert failed" + (f": {msg}" if msg else "")
    # TVM prints a string argument between quotes as it is: escape it as a C string literal.
    text = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    with _tb.If(tirx.Not(condition)):
        with _tb.Then():
            _tb.evaluate(_extern("printf", "%s\\n", text, dtype="int32"))
            _tb.evaluate(_extern("__trap"))


_RW = {"r": 1, "w": 2, "rw": 3}


def access_ptr(base, access_type="r", *extents, offset=0, extent=None, ignore_last_ndim: int = 0):
    """A pointer to an element of a buffer, for an extern device function (`T.call_extern`).

    Args:
        base: `A[i, j]` (that element), a buffer (its first element), or a slice (its first element,
            the slice's size as the extent).
        access_type: "r", "w" or "rw" (1, 2, 3): what the callee does through the pointer; the
            compiler's barrier insertion counts it as such an access of `extent` elements.
        *extents: the accessed region's extents (their product is the extent); default 1 element
            for `A[i, j]`, the whole buffer for a buffer.
        offset: elements added to the position (1-D buffers only).
        extent: the extent in elements, overriding `*extents`.
        ignore_last_ndim: the position counts only the leading dimensions (the last ones are 0).

    Errors:
        UserError for a fragment (its elements are spread over the threads) or a bad access type.

    Example:
        T.call_extern("void", "decode_i4s_to_f16", T.access_ptr(B_local, "r"), T.access_ptr(B_dec, "w"))
    """
    rw = _RW.get(access_type, access_type) if isinstance(access_type, str) else access_type
    if rw not in (1, 2, 3):
        raise UserError(f"T.access_ptr: access_type must be 'r', 'w' or 'rw', got {access_type!r}")
    buf, mins, region_extents = _base_of(base)
    if buf.scope() == "local.fragment":
        raise UserError(
            f"T.access_ptr: '{buf.name}' is a fragment, whose elements are spread over the block's "
            "threads; take pointers into T.alloc_local or T.alloc_shared buffers"
        )
    if len(extents) == 1 and isinstance(extents[0], (list, tuple)):
        extents = tuple(extents[0])
    if int(ignore_last_ndim):
        keep = max(0, len(mins) - int(ignore_last_ndim))
        mins = mins[:keep] + [0] * (len(mins) - keep)
    if not (isinstance(offset, builtins.int) and offset == 0):
        if len(mins) != 1:
            raise UserError(f"T.access_ptr: offset= is for 1-D buffers; index '{buf.name}' instead (A[i, j + off])")
        mins = [mins[0] + offset]
    if extent is None:
        if extents:
            extent = math.prod(extents) if all(isinstance(e, builtins.int) for e in extents) else _product(extents)
        elif region_extents is not None:
            extent = _product(region_extents)
        elif isinstance(base, ir.TensorLoad):
            extent = 1
        else:  # from the position to the buffer's end
            extent = _product(buf.shape) - _flat_offset(buf, mins)
    return buf.access_ptr(rw, offset=_flat_offset(buf, mins), extent=extent)


def _product(values):
    out = tirx.const(1, "int32")
    for v in values:
        out = out * v
    return out


def _base_of(base):
    """(buffer, start indices, region extents or None) of a pointer base."""
    if isinstance(base, ir.TensorLoad):
        buf = base.source
        mins, exts = [], []
        for idx in base.indices:
            if isinstance(idx, ir.Range):  # A[i, j:j + 8]
                mins.append(idx.min)
                exts.append(idx.extent)
            else:
                mins.append(idx)
                exts.append(1)
        return buf, mins, (exts if any(not isinstance(e, builtins.int) or e != 1 for e in exts) else None)
    region = getattr(base, "region", None)
    if region is not None and hasattr(base, "buffer"):  # a slice, A[0:16, k]
        return base.buffer, [r.min for r in region], [r.extent for r in region]
    if tirx.is_buffer_var(base):
        return base, [0] * len(base.shape), None
    raise UserError(f"T.access_ptr: expected a buffer, an element A[i, j] or a slice, got {base!r}")


def _flat_offset(buf, mins):
    """Row-major offset of `mins` in `buf` (its strides when it has them)."""
    strides = list(buf.strides) if len(buf.strides) else None
    off = tirx.const(0, "int32")
    if strides:
        for m, s in zip(mins, strides):
            off = off + m * s
        return off
    for m, n in zip(mins, buf.shape):
        off = off * n + m
    return off


def import_source(source: str | None = None):
    """Put CUDA `source` (device functions an extern call uses) at the top of the generated file.

    Example:
        T.import_source(decode_source)
        T.call_extern("void", "decode_i4s_to_f16", T.access_ptr(B_local, "r"), T.access_ptr(B_dec, "w"))
    """
    if source is None:
        return None
    if not isinstance(source, str):
        raise UserError(f"T.import_source takes the CUDA source as a string, got {type(source).__name__}")
    # TVM's pragma for source a C-family code generator declares before the kernels.
    return _tb.attr(tirx.const(0, "int32"), "pragma_import_c", ir.StringImm(source))


def _pointee(ptr, what):
    """The element dtype a `T.access_ptr`/`tvm_access_ptr` points to."""
    if isinstance(ptr, ir.Call) and isinstance(ptr.op, ir.Op) and ptr.op.name == "tirx.tvm_access_ptr":
        return str(ptr.args[0].ty.dtype)
    raise UserError(f"{what}: expected pointers from T.access_ptr, got {ptr!r}")


def ptx_cp_async(dst_access_ptr, src_access_ptr, num_elems, predicate=None):
    """Start an asynchronous copy (`cp.async`, sm_80+) of `num_elems` elements (4, 8 or 16 bytes)
    from global memory to shared memory. With `predicate` false, zeros are written instead.
    Complete it with `T.ptx_commit_group()` and `T.ptx_wait_group(n)`, or an mbarrier
    (`T.cp_async_barrier_noinc`).

    Example:
        T.ptx_cp_async(T.access_ptr(K_shared[r, c], "w", 8), T.access_ptr(K[b, idx, c], "r", 8), 8)
    """
    dtype = _pointee(dst_access_ptr, "T.ptx_cp_async")
    _pointee(src_access_ptr, "T.ptx_cp_async")
    if not isinstance(num_elems, builtins.int):
        raise UserError(f"T.ptx_cp_async: num_elems must be a constant int, got {num_elems!r}")
    nbytes = num_elems * dtype_bits(dtype) // 8
    if nbytes not in (4, 8, 16):
        raise UserError(f"T.ptx_cp_async copies 4, 8 or 16 bytes; {num_elems} {dtype} elements are {nbytes} bytes")
    valid = tirx.const(True, "bool") if predicate is None else predicate
    return intrinsics.CP_ASYNC.call({"bytes": nbytes}, dst_access_ptr, src_access_ptr, valid)


def ptx_commit_group():
    """Close the group of `T.ptx_cp_async` copies issued since the last commit (`cp.async.commit_group`)."""
    return _extern("tl::cp_async_commit")


def ptx_wait_group(num: int):
    """Wait until at most `num` committed groups of `T.ptx_cp_async` copies are still in flight
    (`cp.async.wait_group`); 0 waits for all."""
    if not isinstance(num, builtins.int) or num < 0:
        raise UserError(f"T.ptx_wait_group: num must be a constant int >= 0, got {num!r}")
    return intrinsics.CP_ASYNC_WAIT.call({"pending": num})


def dp4a(A, B, C):
    """`C += dot(A[0:4], B[0:4])` on four int8 values each (CUDA's `__dp4a`), C an int32.

    A, B: int8 elements `buf[i]` (the four starting there) or buffers (their first four);
    C: an int32 element or buffer (its first element).

    Example: T.dp4a(A_local[k * 4], B_local[k * 4], acc[0])
    """
    a_buf, a_idx = _element(A, "A")
    b_buf, b_idx = _element(B, "B")
    c_buf, c_idx = _element(C, "C")
    for name, buf, want in (("A", a_buf, "int8"), ("B", b_buf, "int8"), ("C", c_buf, "int32")):
        if str(buf.dtype) != want:
            raise UserError(f"T.dp4a: {name} must be {want}, got '{buf.name}' of {buf.dtype}")

    def packed(buf, idx):  # four consecutive int8 as one int32 (CUDA's dp4a operand)
        vec = tirx.BufferLoad(buf, idx[:-1] + [tirx.Ramp(idx[-1], 1, 4)])
        return tirx.reinterpret("int32", vec)

    acc = tirx.BufferLoad(c_buf, c_idx)
    return tirx.BufferStore(
        c_buf, _extern("__dp4a", packed(a_buf, a_idx), packed(b_buf, b_idx), acc, dtype="int32"), c_idx
    )


def _element(x, what):
    if isinstance(x, ir.TensorLoad):
        return x.source, list(x.indices)
    if tirx.is_buffer_var(x):
        return x, [tirx.const(0, "int32")] * len(x.shape)
    raise UserError(f"T.dp4a: {what} must be a buffer element or a buffer, got {x!r}")


def sync_threads(barrier_id: int | None = None, arrive_count: int | None = None):
    """A barrier over the block (`__syncthreads()`), or with `barrier_id` and `arrive_count`
    over `arrive_count` threads on named barrier `barrier_id` (1-15; `bar.sync id, count`).

    Example: T.sync_threads()  /  T.sync_threads(1, 128)   # the first warpgroup's barrier
    """
    if barrier_id is None and arrive_count is None:
        return tirx.call_intrin("int32", "tirx.tvm_storage_sync", "shared")
    if not isinstance(barrier_id, builtins.int) or not 0 <= barrier_id < 16:
        raise UserError(f"T.sync_threads: barrier_id must be a constant in [0, 16), got {barrier_id!r}")
    if not isinstance(arrive_count, builtins.int) or arrive_count <= 0 or arrive_count % 32:
        raise UserError(f"T.sync_threads: arrive_count must be a constant multiple of 32, got {arrive_count!r}")
    return intrinsics.NAMED_BARRIER_SYNC.call({"id": barrier_id, "threads": arrive_count})


def sync_grid():
    """A barrier over every thread of every block of the launch: no thread goes on until all have
    arrived (`cooperative_groups::this_grid().sync()`). A kernel that calls it is launched
    cooperatively, which needs every block resident at once: launch at most as many blocks as the
    GPU holds together (a persistent kernel, `T.Kernel(sm_count)`); a larger grid fails to launch
    with cudaErrorCooperativeLaunchTooLarge.

    Example:
        ...  # each block writes its partial results to global memory
        T.sync_grid()
        ...  # each block reads the others' partial results
    """
    return _extern("tl::sync_grid")


def parallel(start, stop=None, *, annotations=None):
    """A one-variable parallel loop, TVM's spelling: `for i in T.parallel(n)` is
    `for i in T.Parallel(n)` (its iterations are spread over the block's threads)."""
    if stop is None:
        start, stop = 0, start
    return _tb.parallel(start, stop, annotations=annotations)


__all__ = [
    "access_ptr",
    "assume",
    "attr",
    "clamp",
    "comm_reducer",
    "device_assert",
    "dp4a",
    "import_source",
    "index_to_coordinates",
    "parallel",
    "ptx_commit_group",
    "ptx_cp_async",
    "ptx_wait_group",
    "shift_left",
    "shift_right",
    "sync_grid",
    "sync_threads",
    "tvm_thread_allreduce",
    "tvm_warp_shuffle",
    "tvm_warp_shuffle_down",
    "tvm_warp_shuffle_up",
]
