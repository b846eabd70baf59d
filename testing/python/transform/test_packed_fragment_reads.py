"""A fragment of packed bytes read two loop iterations per element, `B_local[i, j // 2]`, in a
T.Parallel over the unpacked tile: the public dequantize_gemm examples (fp4 Hopper GEMM, w4a8 GEMM)
unpack 4-bit values this way. Layout inference lays the bytes out where the iterations reading them
run (the index map j -> j // 2 leaves j % 2 out: those iterations), and a loop reading a byte
fragment laid out first runs a byte's iterations on its holders. The GPU twin is
test_packed_fragment_reads_gpu.py."""

import re

import numpy as np
import pytest
import tvm_ffi
from tvm import tirx

import tilelang
import tilelang.language as T
from tilelang.codegen import cuda
from tilelang.layout import fragment as fl
from tilelang.layout.evaluate import grid
from tilelang.transform.expand_elementwise_ops import expand_elementwise_ops
from tilelang.transform.infer_layout import FRAGMENT_LAYOUTS, LOOP_LAYOUT, infer_layout
from tilelang.transform.legalize_safe_memory_access import legalize_safe_memory_access
from tilelang.transform.select_gemm_instructions import select_gemm_instructions
from tilelang.utils.target import determine_target


def unpack_int4(n: int = 64, k: int = 128, threads: int = 128, c_layout=None):
    """B (n, k // 2) uint8, two signed 4-bit values per byte (low nibble first) -> C (n, k) int8."""

    @T.prim_func
    def main(B: T.Tensor((n, k // 2), T.uint8), C: T.Tensor((n, k), T.int8)):
        with T.Kernel(1, threads=threads):
            B_shared = T.alloc_shared((n, k // 2), T.uint8)
            B_local = T.alloc_fragment((n, k // 2), T.uint8)
            C_local = T.alloc_fragment((n, k), T.int8)
            if c_layout is not None:
                T.annotate_layout({C_local: c_layout})
            T.copy(B, B_shared)
            T.copy(B_shared, B_local)
            for i, j in T.Parallel(n, k):
                nibble = (B_local[i, j // 2] >> ((j % 2) * 4).astype(T.uint8)) & T.uint8(15)
                C_local[i, j] = T.reinterpret(T.int8, nibble << T.uint8(4)) >> T.int8(4)
            T.copy(C_local, C)

    return main


def dequantize_into_gemm(m: int = 64, n: int = 64, k: int = 64, threads: int = 128):
    """C = A @ dequant(B)^T, B (n, k // 2) uint8 holding unsigned 4-bit values, low nibble first:
    the packed fragment is read by the loop that fills the gemm's register operand."""

    @T.prim_func
    def main(B: T.Tensor((n, k // 2), T.uint8), A: T.Tensor((m, k), T.float16), C: T.Tensor((n, m), T.float32)):
        with T.Kernel(1, threads=threads):
            A_shared = T.alloc_shared((m, k), T.float16)
            B_shared = T.alloc_shared((n, k // 2), T.uint8)
            B_local = T.alloc_fragment((n, k // 2), T.uint8)
            B_half = T.alloc_fragment((n, k), T.float16)
            C_local = T.alloc_fragment((n, m), T.float32)
            T.clear(C_local)
            T.copy(A, A_shared)
            T.copy(B, B_shared)
            T.copy(B_shared, B_local)
            for i, j in T.Parallel(n, k):
                B_half[i, j] = ((B_local[i, j // 2] >> ((j % 2) * 4).astype(T.uint8)) & T.uint8(15)).astype(T.float16)
            T.gemm(B_half, A_shared, C_local, transpose_B=True)
            T.copy(C_local, C)

    return main


def _infer(func, target="sm_80"):
    func = select_gemm_instructions(func.with_attr("target", determine_target(target)))
    return infer_layout(legalize_safe_memory_access(expand_elementwise_ops(func)))


def _layouts(func):
    fragments = {b.name: fl.from_ir(v) for b, v in func.attrs[FRAGMENT_LAYOUTS].items()}
    loops = []

    def on_for(loop):
        if LOOP_LAYOUT in loop.annotations and not isinstance(loop.annotations[LOOP_LAYOUT], str):
            loops.append(fl.from_ir(loop.annotations[LOOP_LAYOUT]))

    tvm_ffi.structural_walk(func.body, [(tirx.For, on_for)], order="pre")
    return fragments, loops


def _unpacking_loop(loops, shape):
    found = [lay for lay in loops if tuple(lay.shape) == shape]
    assert found, [lay.shape for lay in loops]
    return found[-1]


def _assert_bytes_held_where_read(loop, packed):
    """Every thread running iteration (i, j) holds packed[i, j // 2]."""
    i, j = (p.reshape(-1) for p in grid(loop.shape))
    runners = loop.holder_threads([i, j])
    for row in runners:
        assert packed.holds(row, [i, j // 2]).all()


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_packed_fragment_read_by_two_iterations_per_element_builds(target):
    kernel = tilelang.compile(unpack_int4(), target=target)
    src = kernel.get_kernel_source()
    # The two iterations reading one byte are lanes of one vector: the byte is broadcast, not
    # gathered over more lanes than bytes (TVM prints such a gather of uint8 lanes wrong).
    assert re.search(r"make_uchar2\(B_local_local_ptr\[(\w+)\], B_local_local_ptr\[\1\]\)", src)
    cuda.compile_object(src, kernel.target)


def test_bytes_live_with_the_iterations_reading_them():
    fragments, loops = _layouts(_infer(unpack_int4()))
    packed, loop = fragments["B_local"], _unpacking_loop(loops, (64, 128))
    _assert_bytes_held_where_read(loop, packed)
    # A byte's two iterations run on one thread, one register apart: no copies, 32 bytes a thread.
    assert not packed.groups and packed.local_size == 64 * 64 // 128
    threads, index = (t.reshape(64, 128) for t in loop.tables())
    assert (threads[:, 0::2] == threads[:, 1::2]).all() and (index[:, 1::2] == index[:, 0::2] + 1).all()


def test_a_byte_read_on_two_threads_is_held_by_both():
    # C_local puts column j on thread j: the iterations reading byte (i, m) run on threads 2m and
    # 2m + 1, which both hold it (the copy into B_local writes both copies).
    layout = T.Fragment((8, 128), forward_thread_fn=lambda i, j: j, forward_index_fn=lambda i, j: i)
    fragments, loops = _layouts(_infer(unpack_int4(n=8, c_layout=layout)))
    packed = fragments["B_local"]
    assert packed.groups == [(1, 2)] and packed.local_size == 8
    _assert_bytes_held_where_read(_unpacking_loop(loops, (8, 128)), packed)
    i, m = (p.reshape(-1) for p in grid((8, 64)))
    assert np.array_equal(np.sort(packed.holder_threads([i, m]), axis=0), np.stack([2 * m, 2 * m + 1]))
    kernel = tilelang.compile(unpack_int4(n=8, c_layout=layout), target="sm_80")
    cuda.compile_object(kernel.get_kernel_source(), kernel.target)


def test_a_loop_follows_a_packed_fragment_laid_out_first():
    # B_local's layout fixed first (annotated: byte (i, m) on thread (i * 64 + m) // 32, register m % 32):
    # the unpacking loop runs both iterations of a byte on its holder, in consecutive registers.
    layout = T.Fragment(
        (64, 64), forward_thread_fn=lambda i, m: (i * 64 + m) // 32, forward_index_fn=lambda i, m: m % 32
    )

    @T.prim_func
    def main(B: T.Tensor((64, 64), T.uint8), C: T.Tensor((64, 128), T.uint8)):
        with T.Kernel(1, threads=128):
            B_local = T.alloc_fragment((64, 64), T.uint8)
            C_local = T.alloc_fragment((64, 128), T.uint8)
            T.annotate_layout({B_local: layout})
            T.copy(B, B_local)
            for i, j in T.Parallel(64, 128):
                C_local[i, j] = (B_local[i, j // 2] >> ((j % 2) * 4).astype(T.uint8)) & T.uint8(15)
            T.copy(C_local, C)

    fragments, loops = _layouts(_infer(main))
    loop = _unpacking_loop(loops, (64, 128))
    _assert_bytes_held_where_read(loop, fragments["B_local"])
    threads, index = (t.reshape(64, 128) for t in loop.tables())
    expected = (np.arange(64)[:, None] * 64 + np.arange(128)[None, :] // 2) // 32
    assert np.array_equal(threads, expected)
    assert np.array_equal(index, np.broadcast_to(np.arange(128) % 64, (64, 128)))
    kernel = tilelang.compile(main, target="sm_90a")
    cuda.compile_object(kernel.get_kernel_source(), kernel.target)


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_packed_bytes_dequantized_into_a_gemm_operand(target):
    # The loop follows the gemm's register operand (mma.sync / wgmma A): the bytes follow the loop.
    fragments, loops = _layouts(_infer(dequantize_into_gemm(), target))
    _assert_bytes_held_where_read(_unpacking_loop(loops, (64, 64)), fragments["B_local"])
    # An operand's pairs of k sit on one thread: the bytes have the operand's copies (warps that
    # share its rows), no more, and half its registers.
    packed, operand = fragments["B_local"], fragments["B_half"]
    assert packed.replicate == operand.replicate and packed.local_size * 2 == operand.local_size
    kernel = tilelang.compile(dequantize_into_gemm(), target=target)
    src = kernel.get_kernel_source()
    cuda.compile_object(src, kernel.target)
