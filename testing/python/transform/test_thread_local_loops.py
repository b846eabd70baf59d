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


def test_a_loop_storing_its_own_values_elsewhere_runs_whole_on_every_thread():
    # Reading the thread's own buffer along the loop's index: spread over the threads, thread t would
    # store only its value t (to shared memory, or through a call's pointer). Both loops are the
    # thread's own, as a T.copy from a local buffer is in the public TileLang.
    for kw in ({"store_to_shared": True}, {"pointer_to_shared": True}):
        layouts = _loop_layouts(scale_local_values(**kw))
        assert len(layouts) == 2 and all(isinstance(lay, str) and lay == THREAD_LOCAL for lay in layouts), kw


def broadcast_local_value():
    """A loop reading a local value at a fixed index (every iteration the same) into shared memory."""

    @T.prim_func
    def main(S: T.Tensor((128,), T.float16), B: T.Tensor((128,), T.float16)):
        with T.Kernel(1, threads=128):
            tx = T.get_thread_binding()
            scale = T.alloc_local((1,), T.float16)
            staged = T.alloc_shared((128,), T.float16)
            scale[0] = S[tx]
            for i in T.Parallel(128):
                staged[i] = scale[0]
            B[tx] = staged[tx]

    return main


def test_a_loop_reading_a_local_value_at_a_fixed_index_stays_spread():
    # (the guard) a broadcast of one value into shared memory: the block's threads share the stores.
    (layout,) = _loop_layouts(broadcast_local_value())
    assert not isinstance(layout, str)


def rows_from_local_buffers():
    """Each thread fills its own local row and copies it to its row of the output (the public gemm_sp
    compressor's last step: T.copy(sparse_local, nonzero[row, tn * 16 : (tn + 1) * 16]))."""

    @T.prim_func
    def main(A: T.Tensor((64, 16), T.float16), B: T.Tensor((64, 16), T.float16)):
        with T.Kernel(1, threads=64):
            tx = T.get_thread_binding()
            row = T.alloc_local((16,), T.float16)
            for j in T.serial(16):
                row[j] = A[tx, j] * T.float16(2)
            T.copy(row, B[tx, 0:16])

    return main


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_a_copy_from_a_local_buffer_writes_the_whole_buffer_from_every_thread(target):
    kernel = tilelang.compile(rows_from_local_buffers(), target=target)
    src = kernel.get_kernel_source()
    # Every thread stores all 16 of its values to its own row (before: thread t < 16 stored value t
    # of its buffer at a column computed from t, and 99.9% of the compressed matrix was wrong).
    stores = [line for line in src.splitlines() if "B_ptr[" in line]
    assert stores and all("row_ptr[" in line for line in stores)
    assert "threadIdx.x) < 16" not in src
    cuda.compile_object(src, kernel.target)
