"""Pass `widen_large_indices`: the accesses to a tensor of 2**31 elements or more index it in int64.

A tensor's sizes are int32 constants, so its accesses' indices are int32 and the offset flattening
computes, `e * N * K + n * K + k`, is int32 too: past 2**31 elements (a [160, 4096, 4096] stack of
expert weights) it wraps, and the kernel reads or writes the wrong address. Casting the indices of
such a tensor's accesses to int64 makes the flattened offset int64 (TVM widens the constant sizes to
match); `NarrowDataType` keeps it there, since its range does not fit int32. (A dynamic size declared
`T.dynamic(name, "int64")` already gives int64 offsets; tensors whose sizes are not all constants
are left to that.)

Before:  B[e, 7, i]                        (B: [160, 4096, 4096])
After:   B[T.int64(e), T.int64(7), T.int64(i)]

Requires per-thread TIR before `FlattenBuffer`. Guarantees: every access to a global tensor of
2**31 elements or more has int64 indices.
"""

from __future__ import annotations

import math

import tvm_ffi
from tvm import ir, tirx

from tilelang.utils.ir import const_int

_INT32_ELEMENTS = 2**31


def _large(buffer) -> bool:
    sizes = [const_int(n) for n in buffer.shape]
    return buffer.scope() == "global" and None not in sizes and math.prod(sizes) >= _INT32_ELEMENTS


def _widened(indices) -> list:
    return [tirx.Cast("int64", i) if str(i.ty.dtype) != "int64" else i for i in indices]


def widen_large_indices(func: tirx.PrimFunc) -> tirx.PrimFunc:
    def on_load(ld):
        return tirx.BufferLoad(ld.source, _widened(ld.indices)) if _large(ld.source) else ld

    def on_store(st):
        if not _large(st.buffer):
            return st
        return tirx.BufferStore(st.buffer, st.value, _widened(st.indices), span=st.span)

    body = tvm_ffi.structural_map(func.body, [(ir.TensorLoad, on_load), (tirx.BufferStore, on_store)], order="post")
    return func if body.same_as(func.body) else func.with_body(body)
