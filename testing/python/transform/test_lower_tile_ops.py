"""Parallel loops become per-thread loops; fragments become per-thread register arrays."""

import pytest
from ir_testing import assert_ir_equal

import tilelang.language as T
from tilelang.errors import UserError
from tilelang.layout import fragment as fl
from tilelang.testing import assert_points_at
from tilelang.transform.expand_elementwise_ops import expand_elementwise_ops
from tilelang.transform.infer_layout import infer_layout
from tilelang.transform.legalize_safe_memory_access import legalize_safe_memory_access
from tilelang.transform.lower_tile_ops import lower_tile_ops


def _run(func):
    return lower_tile_ops(infer_layout(legalize_safe_memory_access(expand_elementwise_ops(func))))


def test_vectorized_copy_through_a_fragment():
    @T.prim_func
    def before(A: T.Tensor((1024, 64), "float32"), C: T.Tensor((1024, 64), "float32")):
        with T.Kernel(8, threads=128) as bx:
            f = T.alloc_fragment((128, 64), "float32")
            T.copy(A[bx * 128, 0], f)
            T.copy(f, C[bx * 128, 0])

    @T.prim_func
    def expected(A: T.Tensor((1024, 64), "float32"), C: T.Tensor((1024, 64), "float32")):
        with T.Kernel(8, threads=128) as bx:
            tx = T.get_thread_binding()
            f_local = T.alloc_local((64,), "float32")
            for r in T.serial(16):
                for v in T.vectorized(4):
                    f_local[r * 4 + v] = A[bx * 128 + (r * 8 + tx // 16), tx % 16 * 4 + v]
            for r in T.serial(16):
                for v in T.vectorized(4):
                    C[bx * 128 + (r * 8 + tx // 16), tx % 16 * 4 + v] = f_local[r * 4 + v]

    assert_ir_equal(_run(before), expected)


def test_partial_round_gets_a_validity_guard():
    @T.prim_func
    def before(A: T.Tensor((99,), "float32")):
        with T.Kernel(1, threads=64):
            for i in T.Parallel(99):  # odd: no vector fits
                A[i] = A[i] * 2.0

    @T.prim_func
    def expected(A: T.Tensor((99,), "float32")):
        with T.Kernel(1, threads=64):
            tx = T.get_thread_binding()
            for r in T.serial(2):
                if r != 1 or tx < 35:  # the inverse's padding predicate, simplified
                    A[r * 64 + tx] = A[r * 64 + tx] * T.float32(2.0)

    assert_ir_equal(_run(before), expected)


def test_vectors_when_they_take_fewer_rounds():
    # 100 elements on 64 threads: two rounds one by one, one round of 4-wide vectors (on 25 threads).
    @T.prim_func
    def before(A: T.Tensor((100,), "float32")):
        with T.Kernel(1, threads=64):
            for i in T.Parallel(100):
                A[i] = A[i] * 2.0

    @T.prim_func
    def expected(A: T.Tensor((100,), "float32")):
        with T.Kernel(1, threads=64):
            tx = T.get_thread_binding()
            for v in T.vectorized(4):
                if tx < 25:
                    A[tx * 4 + v] = A[tx * 4 + v] * T.float32(2.0)

    assert_ir_equal(_run(before), expected)


def test_fragment_read_outside_parallel_is_an_error():
    # Read outside loops, by every thread: only a fragment every thread holds whole can be (see
    # test_fragment_access_patterns.py); this one's annotated layout spreads it over the threads.
    spread = fl.partition((64,), 64)

    @T.prim_func
    def before(A: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=64):
            f = T.alloc_fragment((64,), "float32")
            T.annotate_layout({f: spread})
            T.copy(A, f)
            A[0] = f[3]

    with pytest.raises(UserError, match="fragment 'f' is read outside a T.Parallel") as err:
        _run(before)
    assert_points_at(err, "A[0] = f[3]")


def test_each_kernel_uses_its_own_threads():
    @T.prim_func
    def before(A: T.Tensor((512,), "float32")):
        with T.Kernel(2, threads=(64, 4)) as bx:
            for i in T.Parallel(256):
                A[bx * 256 + i] = A[bx * 256 + i] + 1.0
        with T.Kernel(4, threads=128) as bx:
            for i in T.Parallel(128):
                A[bx * 128 + i] = A[bx * 128 + i] * 2.0

    @T.prim_func
    def expected(A: T.Tensor((512,), "float32")):
        with T.Kernel(2, threads=(64, 4)) as bx:
            tx, ty = T.get_thread_bindings()
            A[bx * 256 + (ty * 64 + tx)] = A[bx * 256 + (ty * 64 + tx)] + T.float32(1.0)
        with T.Kernel(4, threads=128) as bx:
            tx = T.get_thread_binding()
            A[bx * 128 + tx] = A[bx * 128 + tx] * T.float32(2.0)

    assert_ir_equal(_run(before), expected)


def _reduce_kernel(rows, cols, threads):
    @T.prim_func
    def main(A: T.Tensor((rows, cols), "float32"), B: T.Tensor((rows,), "float32")):
        with T.Kernel(1, threads=threads):
            x = T.alloc_fragment((rows, cols), "float32")
            m = T.alloc_fragment((rows,), "float32")
            T.copy(A, x)
            T.reduce_sum(x, m, dim=1)
            T.copy(m, B)

    return main


def test_reduction_inside_a_warp_uses_shuffles_only():
    text = _run(_reduce_kernel(128, 64, 128)).script()  # 16 lanes per row
    assert text.count("tl::shfl_xor") == 4 and "workspace" not in text


def test_reduction_across_warps_uses_shuffles_then_a_workspace():
    text = _run(_reduce_kernel(1, 4096, 256)).script()  # one row over 8 warps
    assert text.count("tl::shfl_xor") == 5
    assert 'workspace_0 = T.alloc_buffer((256,), scope="shared.dyn")' in text


def test_annotated_shared_layout_reindexes_every_access():
    from tilelang.layout import make_swizzled_layout

    @T.prim_func
    def before(A: T.Tensor((64, 64), "float16"), B: T.Tensor((64, 64), "float16")):
        with T.Kernel(1, threads=128):
            s = T.alloc_shared((64, 64), "float16")
            T.annotate_layout({s: make_swizzled_layout(s)})
            T.copy(A, s)
            T.copy(s, B)

    text = _run(before).script()
    assert 's = T.alloc_buffer((4096,), "float16", scope="shared.dyn")' in text
    assert text.count("^") >= 2  # both the write and the read go through the XOR swizzle


def test_threads_past_a_small_tile_do_nothing():
    @T.prim_func
    def before(A: T.Tensor((16,), "float32"), B: T.Tensor((16,), "float32")):
        with T.Kernel(1, threads=128):
            s = T.alloc_shared((16,), "float32")
            T.copy(A, s)
            T.copy(s, B)

    @T.prim_func
    def expected(A: T.Tensor((16,), "float32"), B: T.Tensor((16,), "float32")):
        with T.Kernel(1, threads=128):
            tx = T.get_thread_binding()
            s = T.alloc_shared((16,), "float32")
            if tx < 16:
                s[tx] = A[tx]
            if tx < 16:
                B[tx] = s[tx]

    assert_ir_equal(_run(before), expected)


def test_a_128x128_fp32_fragment_over_128_threads_is_128_registers():
    @T.prim_func
    def before(A: T.Tensor((128, 128), "float32"), B: T.Tensor((128, 128), "float32")):
        with T.Kernel(1, threads=128):
            f = T.alloc_fragment((128, 128), "float32")
            T.copy(A, f)
            for i, j in T.Parallel(128, 128):
                f[i, j] = f[i, j] * 2.0
            T.copy(f, B)

    assert "f_local = T.alloc_local((128,))" in _run(before).script()


def test_loop_over_a_dynamic_extent_runs_in_rounds_over_the_threads():
    M = T.dynamic("m")

    @T.prim_func
    def before(A: T.Tensor((M,), "float32"), C: T.Tensor((M,), "float32")):
        with T.Kernel(1, threads=128):
            for i in T.Parallel(M):
                C[i] = A[i] * 2.0

    @T.prim_func
    def expected(A: T.Tensor((M,), "float32"), C: T.Tensor((M,), "float32")):
        with T.Kernel(1, threads=128):
            tx = T.get_thread_binding()
            for r in T.serial((M + 127) // 128):
                if r * 128 + tx < M:
                    C[r * 128 + tx] = A[r * 128 + tx] * T.float32(2.0)

    assert_ir_equal(_run(before), expected)


def test_global_copy_of_a_dynamic_region_unflattens_row_major():
    M = T.dynamic("m", "int64")

    @T.prim_func
    def before(A: T.Tensor((M, 64), "float16"), C: T.Tensor((M, 64), "float16")):
        with T.Kernel(1, threads=128):
            T.copy(A, C)

    text = _run(before).script()
    assert "for r in range((m * T.int64(64) + T.int64(127)) // T.int64(128)):" in text
    assert 'if r * T.int64(128) + T.Cast("int64", tx) < m * T.int64(64):' in text
    # The row needs no `%` (the guard bounds it); the column is the flat index modulo 64.
    assert 'C[(r * T.int64(128) + T.Cast("int64", tx)) // T.int64(64), T.Cast("int32"' in text


def test_loop_over_a_dynamic_extent_cannot_touch_a_fragment():
    M = T.dynamic("m")

    @T.prim_func
    def before(A: T.Tensor((M,), "float32")):
        with T.Kernel(1, threads=128):
            f = T.alloc_fragment((128,), "float32")
            for i in T.Parallel(M):
                f[i % 128] = A[i]

    with pytest.raises(UserError) as info:
        _run(before)
    assert_points_at(info, "for i in T.Parallel(M):")
    text = str(info.value)
    assert "T.Parallel loop of shape [m] has a dynamic extent" in text and "fragment 'f'" in text
    assert "for i in T.Parallel(M):" in text


def _hand_written_cp_async(shift=0):
    """Each of 128 threads copies 16-byte chunks of B into a tile laid out in wgmma's 128-byte
    panels, with its own cp.async (as the public sparse MLA kernels load the rows they gather);
    with `shift`, chunks that many elements to the right (off the tile's 16-byte chunks)."""
    elems = 8
    from tilelang.layout import layout as sl

    @T.prim_func
    def before(B: T.Tensor((64, 128), "float16")):
        with T.Kernel(1, threads=128):
            tx = T.get_thread_binding()
            s = T.alloc_shared((64, 128), "float16")
            T.annotate_layout({s: sl.gmma_panels((64, 128), 16, 3)})
            for r in T.serial(64 * 128 // (128 * elems)):
                row = (r * 128 + tx) * elems // 128
                col = (r * 128 + tx) * elems % 128
                T.ptx_cp_async(T.access_ptr(s[row, col + shift], "w", elems), T.access_ptr(B[row, col], "r", elems), 8)
            T.ptx_commit_group()
            T.ptx_wait_group(0)

    return before


def test_a_hand_written_pointer_into_a_laid_out_tile_points_where_the_layout_puts_its_element():
    import numpy as np
    from tvm import ir, tirx

    from tilelang.layout import layout as sl
    from tilelang.layout.evaluate import evaluate
    from tilelang.utils.ir import collect

    after = _run(_hand_written_cp_async())
    ptrs = [c for c in collect(after.body, ir.Call) if isinstance(c.op, ir.Op) and c.op.name == "tirx.tvm_access_ptr"]
    dst = [p for p in ptrs if p.args[1].args[0].name == "s"]
    assert len(dst) == 1
    (r,) = [f.loop_var for f in collect(after.body, tirx.For)]
    threads = [a for a in collect(after.body, tirx.AttrStmt) if a.attr_key == "thread_extent"]
    (tx,) = [a.node.var for a in threads if a.node.thread_tag == "threadIdx.x"]
    rs, txs = np.meshgrid(np.arange(8), np.arange(128), indexing="ij")
    got = evaluate(dst[0].args[2], {r: rs, tx: txs})
    flat = (rs * 128 + txs) * 8
    panels = sl.gmma_panels((64, 128), 16, 3)
    want = evaluate(panels.forward, {panels.vars[0]: flat // 128, panels.vars[1]: flat % 128})
    assert np.array_equal(got, want)  # before: the row-major offset, flat


def test_a_pointer_across_the_layouts_contiguous_runs_is_an_error_at_the_users_line():
    # 8 fp16 elements from column 8k + 4 are halves of two 16-byte chunks, which the swizzle moves apart.
    with pytest.raises(UserError) as err:
        _run(_hand_written_cp_async(shift=4))
    assert_points_at(err, 'T.ptx_cp_async(T.access_ptr(s[row, col + shift], "w", elems)')
    msg = str(err.value)
    assert "T.access_ptr into 's'" in msg and "at most 8 elements starting at a multiple of 8" in msg
    assert 'T.ptx_cp_async(T.access_ptr(s[row, col + shift], "w", elems)' in msg


def cp_async_into_a_wgmma_operand():
    """C = A @ B, B's tile loaded by each thread's own cp.async (16 bytes each), read by the gemm
    (wgmma on sm_90a: its 128-byte panels; mma.sync on sm_80: its swizzle)."""

    @T.prim_func
    def main(A: T.Tensor((64, 64), "float16"), B: T.Tensor((64, 128), "float16"), C: T.Tensor((64, 128), "float32")):
        with T.Kernel(1, threads=128):
            tx = T.get_thread_binding()
            A_s = T.alloc_shared((64, 64), "float16")
            B_s = T.alloc_shared((64, 128), "float16")
            C_f = T.alloc_fragment((64, 128), "float32")
            T.copy(A, A_s)
            for r in T.serial(8):
                row = r * 8 + tx // 16
                col = tx % 16 * 8
                T.ptx_cp_async(T.access_ptr(B_s[row, col], "w", 8), T.access_ptr(B[row, col], "r", 8), 8)
            T.ptx_commit_group()
            T.ptx_wait_group(0)
            T.sync_threads()
            T.gemm(A_s, B_s, C_f, clear_accum=True)
            T.copy(C_f, C)

    return main


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_cp_async_into_a_gemm_operand_compiles(arch):
    import tilelang
    from tilelang.codegen import cuda

    k = tilelang.compile(cp_async_into_a_wgmma_operand(), out_idx=[2], target=arch)
    src = k.get_kernel_source()
    assert ("tl::wgmma_ss<" in src) == (arch == "sm_90a")
    assert "tl::cp_async<16>" in src and "^" in src[src.index("tl::cp_async<16>") :].split(";")[0]  # swizzled
    cuda.compile_object(src, k.target, host_src=k.host_source)
