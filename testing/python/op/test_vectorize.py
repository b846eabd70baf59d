"""op/vectorize.py: the widest vector of a T.Parallel nest's innermost loop (CPU, on IR built here),
and the run-time check that vectors along dynamic sizes get (on generated code)."""

import re

import pytest
import tvm_ffi
from tvm import ir, sym, tirx

import tilelang
import tilelang.language as T
from tilelang.codegen import cuda
from tilelang.op.vectorize import plan_vector_size, split_lanes


def _nest(n=128):
    i, j = tirx.Var("i", "int32"), tirx.Var("j", "int32")
    ana = sym.Analyzer()
    ana.bind(i, ir.Range(0, 64))
    ana.bind(j, ir.Range(0, n))
    return i, j, ana


def _plan(body, i, j, ana, n=128):
    return plan_vector_size([i, j], [tirx.const(64, "int32"), tirx.const(n, "int32")], body, ana)


def test_a_packed_register_read_limits_the_vector_to_the_lanes_of_one_element():
    # B[i, j // 2]: lanes 2v and 2v + 1 read one byte (a broadcast); wider, the lanes gather bytes.
    i, j, ana = _nest()
    packed = tirx.decl_buffer((64, 64), "uint8", "B", scope="local.fragment")
    out = tirx.decl_buffer((64, 128), "uint8", "C", scope="local.fragment")
    body = tirx.BufferStore(out, tirx.BufferLoad(packed, [i, tirx.floordiv(j, 2)]), [i, j])
    assert _plan(body, i, j, ana) == 2


def test_a_register_read_at_a_constant_stride_keeps_the_vector():
    # (the guard) B[i, j] and a transposed read move by a constant per lane: only the type limits them.
    i, j, ana = _nest()
    src = tirx.decl_buffer((64, 128), "uint8", "B", scope="local.fragment")
    out = tirx.decl_buffer((64, 128), "uint8", "C", scope="local.fragment")
    assert _plan(tirx.BufferStore(out, tirx.BufferLoad(src, [i, j]), [i, j]), i, j, ana) == 16


def test_a_value_computed_from_the_loop_variable_counts_its_int32_lanes():
    # (j % 2 * 4).astype(uint8) computes in int32 lanes: at most 8 of them (256 bits) have a CUDA type.
    i, j, ana = _nest()
    out = tirx.decl_buffer((64, 128), "uint8", "C", scope="local.fragment")
    body = tirx.BufferStore(out, tirx.Cast("uint8", tirx.floormod(j, 2) * 4), [i, j])
    assert _plan(body, i, j, ana) == 8


def test_a_cast_inside_an_index_does_not_count():
    i, j, ana = _nest()
    src = tirx.decl_buffer((64, 128), "uint8", "B", scope="shared")
    out = tirx.decl_buffer((64, 128), "uint8", "C", scope="local.fragment")
    index = tirx.Cast("int32", tirx.Cast("int64", j))
    assert _plan(tirx.BufferStore(out, tirx.BufferLoad(src, [i, index]), [i, j]), i, j, ana) == 16


def test_an_index_through_div_and_mod_is_split_per_vector():
    # An im2col channel, (k * 64 + j) % 96 with j = g * 8 + lane: the lane stays out of the // and %.
    k, g, lane = (tirx.Var(n, "int32") for n in ("k", "g", "lane"))
    ana = sym.Analyzer()
    ana.bind(g, ir.Range(0, 8))
    ana.bind(lane, ir.Range(0, 8))
    col = k * 64 + g * 8 + lane
    split = split_lanes(tirx.floormod(col, 96) + tirx.floordiv(col, 96) * 1000, lane, 8, ana)
    base = k * 64 + g * 8
    assert ana.can_prove_equal(split, tirx.floormod(base, 96) + lane + tirx.floordiv(base, 96) * 1000)
    # 12 is not a multiple of 8: the lane may cross a boundary, nothing is split.
    unsplit = tirx.floormod(col, 12)
    assert tvm_ffi.structural_equal(split_lanes(unsplit, lane, 8, ana), unsplit)


def test_an_im2col_tile_loads_eight_channels_at_a_time():
    i, j, ana = _nest(64)
    k = tirx.Var("k", "int32")
    img = tirx.decl_buffer((4, 16, 16, 96), "float16", "img")
    col = tirx.decl_buffer((64, 64), "float16", "col", scope="shared")
    c = k * 64 + j
    load = tirx.BufferLoad(img, [0, i // 16, tirx.floordiv(c, 288), tirx.floormod(c, 96)])
    body = tirx.BufferStore(col, load, [i, j])
    assert _plan(body, i, j, ana, n=64) == 8


def dynamic_copy(dtype="float16"):
    """A tile copy through shared memory of an [m, n] tensor, both sizes dynamic."""
    M, N = T.dynamic("m"), T.dynamic("n")

    @T.prim_func
    def main(A: T.Tensor((M, N), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, 64), T.ceildiv(M, 128), threads=128) as (bx, by):
            s = T.alloc_shared((128, 64), dtype)
            T.copy(A[by * 128, bx * 64], s)
            T.copy(s, C[by * 128, bx * 64])

    return main


def dynamic_gemm(block_K=32, stages=3):
    """The public dynamic-shape GEMM's form: m, n and k all dynamic."""
    M, N, K = T.dynamic("m"), T.dynamic("n"), T.dynamic("k")

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float16")):
        with T.Kernel(T.ceildiv(N, 128), T.ceildiv(M, 128), threads=128) as (bx, by):
            A_s = T.alloc_shared((128, block_K), "float16")
            B_s = T.alloc_shared((block_K, 128), "float16")
            C_f = T.alloc_fragment((128, 128), "float32")
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=stages):
                T.copy(A[by * 128, k * block_K], A_s)
                T.copy(B[k * block_K, bx * 128], B_s)
                T.gemm(A_s, B_s, C_f)
            T.copy(C_f, C[by * 128, bx * 128])

    return main


def _body(src: str) -> str:
    return src[src.index("__global__ void __launch_bounds__") :]


def test_dynamic_row_length_vectorizes_behind_a_run_time_check():
    """Rows of A[m, n] start 8-aligned only when n is a multiple of 8: the copy runs as 128-bit
    vectors when it is (one check, the same for the whole block) and one element at a time
    otherwise. m only bounds the rows, so it is not part of the check."""
    src = _body(tilelang.compile(dynamic_copy(), target="sm_90a").get_kernel_source())
    assert src.count("if ((n % 8) == 0)") == 2 and "m % 8" not in src  # the load, the store
    load = src[: src.index("__syncthreads")]
    vector, scalar = load[: load.index("for (int v = 0")], load[load.index("for (int v = 0") :]
    assert "condval = *(uint4*)(A_ptr" in vector  # a vector load: the address is seen to be aligned
    assert "uint4" not in scalar and "A_ptr[" in scalar


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_dynamic_gemm_loads_its_tiles_with_cp_async_when_rows_align(arch):
    k = tilelang.compile(dynamic_gemm(), target=arch)
    src = _body(k.get_kernel_source())
    assert "if ((k % 8) == 0)" in src and "if ((n % 8) == 0)" in src
    assert "tl::cp_async<16>" in src
    cuda.compile_object(k.get_kernel_source(), k.target, host_src=k.host_source)


def test_static_sizes_need_no_check():
    src = _body(tilelang.compile(_static_copy(), target="sm_90a").get_kernel_source())
    assert "% 8) == 0" not in src and "*(uint4*)" in src


def _static_copy():
    @T.prim_func
    def main(A: T.Tensor((256, 128), "float16"), C: T.Tensor((256, 128), "float16")):
        with T.Kernel(2, 2, threads=128) as (bx, by):
            s = T.alloc_shared((128, 64), "float16")
            T.copy(A[by * 128, bx * 64], s)
            T.copy(s, C[by * 128, bx * 64])

    return main


def test_a_table_lookup_inside_an_index_does_not_narrow_the_vector():
    # K[table[p], j]: the int32 table entry is one load for every lane (a page index), not a
    # 32-bit lane of the vector: fp16 rows still move 8 elements (16 bytes) at a time.
    i, j, ana = _nest()
    table = tirx.decl_buffer((16,), "int32", "table")
    K = tirx.decl_buffer((4096, 128), "float16", "K")
    S = tirx.decl_buffer((64, 128), "float16", "S", scope="shared")
    body = tirx.BufferStore(S, tirx.BufferLoad(K, [tirx.BufferLoad(table, [i // 16]) * 64 + i, j]), [i, j])
    assert _plan(body, i, j, ana) == 8


def test_a_fragment_held_along_rows_loads_from_shared_memory_in_vectors():
    """The public mHC post-norm's form: b_l[i, j] read in a serial loop over i inside T.Parallel(o, j),
    so each thread holds whole columns j of every row. Its registers for consecutive j are
    consecutive: the copy from shared memory reads 4 bfloat16 a load (8 bytes), not one element a
    load (the fragment had no vector width of its own, which had limited the loop's to 1)."""

    @T.prim_func
    def main(
        a: T.Tensor((64, 4, 4), "float32"),
        b: T.Tensor((64, 4, 512), "bfloat16"),
        x: T.Tensor((64, 4, 512), "float32"),
    ):
        with T.Kernel(64, threads=128) as n:
            b_s = T.alloc_shared((4, 512), "bfloat16")
            a_l = T.alloc_fragment((4, 4), "float32")
            b_l = T.alloc_fragment((4, 512), "float32")
            x_l = T.alloc_fragment((4, 512), "float32")
            T.copy(a[n, 0, 0], a_l)
            T.copy(b[n, 0, 0], b_s)
            T.copy(b_s, b_l)
            for o, j in T.Parallel(4, 512):
                x_l[o, j] = 0
                for i in T.serial(4):
                    x_l[o, j] += a_l[i, o] * b_l[i, j]
            T.copy(x_l, x[n, 0, 0])

    src = tilelang.compile(main, target="sm_90a").get_kernel_source()
    assert re.search(r"nv_bfloat164 \w+ = \*\(nv_bfloat164\*\)\(b_s_ptr \+", src), src
    assert not re.search(r"b_l_local_ptr\[\w+\] = \(\(float\)", src)
    cuda.compile_object(src, tilelang.utils.target.determine_target("sm_90a"))


def test_a_bool_fragment_is_written_one_element_at_a_time():
    """A mask fragment computed along contiguous indices (the public sparse MLA forward's
    `mask[i] = Indices[..., i] <= max_kv`): TVM writes a vector of 2 bools as a ushort2, 4 bytes over
    2 one-byte entries, which overwrote the neighbours' (a silent wrong answer); bools stay scalar."""

    @T.prim_func
    def main(Idx: T.Tensor((4, 256), "int32"), Out: T.Tensor((4, 256), "float32")):
        with T.Kernel(4, threads=128) as bx:
            mask = T.alloc_fragment((256,), "bool")
            acc = T.alloc_fragment((256,), "float32")
            for i in T.Parallel(256):
                mask[i] = Idx[bx, i] <= bx
            for i in T.Parallel(256):
                acc[i] = T.if_then_else(mask[i], 1.0, 0.0)
            T.copy(acc, Out[bx, 0])

    src = tilelang.compile(main, target="sm_90a").get_kernel_source()
    assert "ushort2" not in src and re.search(r"mask_local_ptr\[\w+\] = \(", src), src
