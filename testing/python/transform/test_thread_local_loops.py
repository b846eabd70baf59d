"""A T.Parallel loop that stores only into each thread's own buffers (T.alloc_local) and touches no
fragment runs whole on every thread, as the public TileLang lowers it: each thread's local buffer
is its own, so spreading the loop over the threads left each buffer mostly unwritten (the public
bf16 mxfp4 Hopper GEMM scales its 8 dequantized values this way: before, thread t < 8 scaled
element t of its own buffer and the rest stayed unscaled)."""

import re

import pytest
import tvm_ffi
from tvm import tirx

import tilelang
import tilelang.language as T
from tilelang.codegen import cuda
from tilelang.transform.expand_elementwise_ops import expand_elementwise_ops
from tilelang.transform.infer_layout import LOOP_LAYOUT, THREAD_LOCAL, infer_layout
from tilelang.utils.target import determine_target


def scale_local_values(store_to_shared: bool = False, pointer_to_shared: bool = False):
    """Each thread loads 8 values, scales them in its local buffer, and writes them out."""

    @T.prim_func
    def main(A: T.Tensor((1024,), T.float16), S: T.Tensor((128,), T.float16), B: T.Tensor((1024,), T.float16)):
        with T.Kernel(1, threads=128):
            tx = T.get_thread_binding()
            vals = T.alloc_local((8,), T.float16)
            scale = T.alloc_local((1,), T.float16)
            staged = T.alloc_shared((1024,), T.float16)
            for v in T.vectorized(8):
                vals[v] = A[tx * 8 + v]
            scale[0] = S[tx]
            for v in T.Parallel(8):
                vals[v] *= scale[0]
            if store_to_shared:
                for v in T.Parallel(8):
                    staged[tx * 8 + v] = vals[v]
            if pointer_to_shared:
                for v in T.Parallel(8):
                    T.call_extern("void", "consume", T.access_ptr(staged[v * 128], "w"), vals[v])
            for v in T.vectorized(8):
                B[tx * 8 + v] = vals[v] + staged[tx * 8 + v]

    return main


def _loop_layouts(func):
    func = expand_elementwise_ops(func.with_attr("target", determine_target("sm_90a")))
    out = []

    def on_for(loop):
        if LOOP_LAYOUT in loop.annotations:
            out.append(loop.annotations[LOOP_LAYOUT])

    tvm_ffi.structural_walk(infer_layout(func).body, [(tirx.For, on_for)], order="pre")
    return out


def test_a_loop_over_local_buffers_is_marked_thread_local():
    (layout,) = _loop_layouts(scale_local_values())
    assert isinstance(layout, str) and layout == THREAD_LOCAL


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_every_thread_scales_all_of_its_own_values(target):
    kernel = tilelang.compile(scale_local_values(), target=target)
    src = kernel.get_kernel_source()
    loop = re.search(r"for \(int (\w+) = 0; \1 < 8; \+\+\1\) \{\s*(vals_ptr\[\1\] = .*?;)\s*\}", src)
    assert loop is not None, src
    assert "threadIdx" not in loop.group(2)  # its own element v, every v, no thread guard
    assert "threadIdx.x) < 8" not in src
    cuda.compile_object(src, kernel.target)


def test_a_loop_that_also_stores_to_shared_memory_stays_spread():
    # (the guard) shared memory is the block's: the store to it is spread over the threads as before.
    layouts = _loop_layouts(scale_local_values(store_to_shared=True))
    assert sum(isinstance(lay, str) and lay == THREAD_LOCAL for lay in layouts) == 1
    assert len(layouts) == 2


def test_a_loop_passing_a_pointer_to_shared_memory_stays_spread():
    # (the guard) a call may write through the pointer: the loop is not thread-local.
    layouts = _loop_layouts(scale_local_values(pointer_to_shared=True))
    assert sum(isinstance(lay, str) and lay == THREAD_LOCAL for lay in layouts) == 1
    assert len(layouts) == 2
