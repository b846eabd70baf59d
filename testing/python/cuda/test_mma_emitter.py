"""TensorCoreIntrinEmitter on the CPU: a block's ldmatrix / mma.sync / accumulator stores computed
by a lockstep simulator of the traced TIR (warp_sim.py), the user errors, and the generated CUDA
(ldmatrix, mma.sync, barriers, swizzle) compiled by nvcc for sm_80 and sm_90a."""

import re

import numpy as np
import pytest
from mma_kernels import block_kernel, eager_gemm, emitter, gemm
from warp_sim import Block

import tilelang
import tilelang.language as T
from tilelang.codegen import cuda
from tilelang.cuda.intrinsics import TensorCoreIntrinEmitter
from tilelang.errors import UserError
from tilelang.testing import assert_points_at

TYPES = [
    ("float16", "float32"),
    ("float16", "float16"),
    ("bfloat16", "float32"),
    ("float32", "float32"),
    ("int8", "int32"),
]


def _simulate(em, out_dtype=None, tiles_4d=False, seed=0, **kw):
    """(C the block computes, A @ B) for random small integers (exact in every type)."""
    bm, bn = em.block_row_warps * em.warp_row_tiles, em.block_col_warps * em.warp_col_tiles
    depth = em.chunk * em.reduce_k
    rng = np.random.default_rng(seed)
    a, b = rng.integers(-4, 5, (bm, depth)), rng.integers(-4, 5, (depth, bn))
    func = block_kernel(em, out_dtype or em.accum_dtype, tiles_4d, **kw)
    block = Block(func, {"A_s": a.T if em.a_transposed else a, "B_s": b.T if em.b_transposed else b})
    c = block.tile("C_s")
    if tiles_4d:
        c = c.transpose(0, 2, 1, 3).reshape(bm, bn)
    rk = kw.get("rk", 0)
    ks = slice(rk * em.chunk, (rk + 1) * em.chunk)
    return c.astype(np.int64), a[:, ks] @ b[ks, :]


@pytest.mark.parametrize("dtype,accum", TYPES)
@pytest.mark.parametrize("a_transposed,b_transposed", [(False, True), (False, False), (True, True), (True, False)])
def test_a_block_of_warps_multiplies(dtype, accum, a_transposed, b_transposed):
    # 16-bit operands go through ldmatrix (.trans where k is the rows); 8- and 32-bit ones with k as
    # the rows element by element.
    got, want = _simulate(emitter(dtype, accum, a_transposed, b_transposed))
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
    "kw",
    [
        dict(warps=(2, 2), warp_tile=(32, 8)),  # 8-wide tiles: one atom, ldmatrix.x2
        dict(warps=(1, 4), warp_tile=(16, 24), is_m_first=True),
        dict(warps=(4, 1), warp_tile=(16, 64), chunk=64),
    ],
)
def test_tilings_and_warp_orders(kw):
    got, want = _simulate(emitter("float16", "float32", **kw))
    np.testing.assert_array_equal(got, want)


def test_accumulators_to_a_4d_tile_cast_to_its_type():
    got, want = _simulate(emitter("int8", "int32", True, False, warp_tile=(32, 8), chunk=64), "float32", tiles_4d=True)
    np.testing.assert_array_equal(got, want)


def test_mma_atom_per_tile_is_mma():
    got, want = _simulate(emitter("bfloat16", "float32", False, False), atoms=True)
    np.testing.assert_array_equal(got, want)


def test_loads_read_the_k_slice_rk():
    got, want = _simulate(emitter("float16", "float32", True, False, reduce_k=2), rk=1)
    np.testing.assert_array_equal(got, want)


def test_accumulators_to_the_block_at_pid_m_pid_n():
    em = emitter("int8", "int32", chunk=32)
    got, want = _simulate(em, pid=(1, 0))
    bm, bn = 64, 64
    np.testing.assert_array_equal(got[bm:, :bn], want)
    assert not got[:bm].any() and not got[:, bn:].any()


def test_sizes_and_names_of_the_public_emitter():
    em = emitter("int8", "int32", warps=(2, 2), warp_tile=(64, 64), chunk=32)
    assert (em.micro_size_x, em.micro_size_y, em.micro_size_k) == (16, 16, 32)
    assert (em.warp_rows, em.warp_cols, em.local_size_a, em.local_size_b, em.local_size_out) == (4, 4, 16, 16, 8)
    assert em.threads == 128 and em.mma_prefix == "m16n8k32"
    assert (em.mma_num_inst_m, em.mma_num_inst_n) == (4, 4)
    lane, warp_n, warp_m = em.extract_thread_binding(T.int32(101))
    assert (int(lane), int(warp_n), int(warp_m)) == (5, 1, 1)


def test_store_layout_is_where_mma_leaves_the_accumulators():
    em = emitter("float16", "float32", warps=(2, 2), warp_tile=(32, 16))
    buf = tilelang.tvm.tirx.decl_buffer((64, 32), "float32", "C_f", scope="local.fragment")
    frag = em.make_mma_store_layout(buf)
    threads, locals_ = frag.tables()
    # Element (i, j): warp (i // 32, j // 16) in the order warp_m + 2 * warp_n, then the mma map.
    i, j = np.meshgrid(np.arange(64), np.arange(32), indexing="ij")
    i, j = i.reshape(-1), j.reshape(-1)
    warp = (i // 32) + 2 * (j // 16)
    assert np.array_equal(threads, warp * 32 + 4 * (i % 8) + (j % 8) // 2)
    assert locals_.max() + 1 == em.warp_rows * em.warp_cols * em.local_size_out and frag.is_injective()


# ---- errors ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kw,message",
    [
        (dict(b_dtype="int8"), "no mma.sync atom multiplies float16/int8/float32"),
        (dict(warp_row_tiles=24, warp_col_tiles=32), "warp_row_tiles must be a multiple of 16, got 24"),
        (dict(warp_row_tiles=32, warp_col_tiles=12), "warp_col_tiles must be a multiple of 8, got 12"),
        (dict(warp_row_tiles=32, warp_col_tiles=32, chunk=8), "chunk must be a multiple of the float16 atom's K = 16"),
        (dict(warp_row_tiles=32, warp_col_tiles=32, num_elems_per_byte=2), "packed sub-byte operands"),
    ],
)
def test_construction_errors(kw, message):
    args = dict(a_dtype="float16", b_dtype="float16", accum_dtype="float32") | kw
    with pytest.raises(UserError, match=re.escape(message)):  # raised at the call: the traceback shows the user's line
        TensorCoreIntrinEmitter(**args)


def _misuse(what):
    em = emitter("float16", "float32")

    @T.prim_func
    def main(X: T.Tensor((1,), "float32")):
        with T.Kernel(1, threads=64 if what == "threads" else 128):
            A_s = T.alloc_shared((32 if what == "tile" else 64, 32), "float16")
            A_l = T.alloc_local((8 if what == "size" else 16,), "float32" if what == "dtype" else "float16")
            A_f = T.alloc_fragment((64, 32), "float16")
            em.ldmatrix_a(A_f if what == "fragment" else A_l, A_s, 0)

    return main


@pytest.mark.parametrize(
    "what,message",
    [
        ("fragment", "'A_f' is in local.fragment memory; the emitter keeps A_local in each thread's registers"),
        ("dtype", "'A_l' holds float32, the emitter was made for float16"),
        ("size", "'A_l' has 8 elements, the warp's tiles need 16"),
        ("tile", "the tile of 'A_s' has 32 rows, the block's warps read 64"),
        ("threads", "the emitter's 2 x 2 warps need 128 threads, the kernel has 64"),
    ],
)
def test_misuse_is_reported_at_the_users_line(what, message):
    with pytest.raises(UserError, match=re.escape(message)) as err:
        _misuse(what)
    assert_points_at(err, "em.ldmatrix_a(")
    assert "em.ldmatrix_a(" in str(err.value)  # the kernel line


# ---- codegen and nvcc ------------------------------------------------------------------------------


def _source(func, arch="sm_80"):
    return tilelang.compile(func, target=arch).get_kernel_source()


def test_generated_cuda_has_ldmatrix_mma_and_the_barriers():
    src = _source(gemm(256, 256, 256, "float16", "float32", "float16"))
    body = src[src.index("main_kernel(half") :]
    assert body.count("tl::ldmatrix<4, false>(") == 4  # two 16-row A tiles, two 16-column B tiles
    assert body.count("tl::mma_sync<16>(") == 8
    # The T.Parallel loops that load the tiles are copies (raise_copy_loops), pipelined with
    # cp.async: each iteration waits for its stage, then one barrier makes it visible to the other
    # lanes' ldmatrix and frees the stage the next iteration's loads (issued after it) overwrite.
    loop = body[body.index("for (int ko") :]
    head = loop[: loop.index("tl::ldmatrix")]
    assert head.count("__syncthreads()") == 1
    assert head.index("tl::cp_async_wait<0>()") < head.index("__syncthreads()") < head.index("tl::cp_async_commit()")
    assert "^" in loop[loop.index("tl::ldmatrix") :].split(";")[0]  # the row address goes through the swizzle
    assert '#include "tl_templates/cuda/warp_mma.h"' in src


def test_int8_uses_the_k32_atom_and_transposed_16_bit_loads_use_trans():
    src = _source(gemm(128, 128, 128, "int8", "int32", "int32", warp_tile=(32, 32), chunk=64))
    assert "tl::mma_sync<32>(" in src and "tl::ldmatrix<4, false>(" in src
    src = _source(gemm(128, 128, 128, "float16", "float32", "float32", a_transposed=True, b_transposed=False))
    assert "tl::ldmatrix<4, true>(" in src and "tl::ldmatrix<4, false>(" not in src


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize(
    "dtype,accum,out,kw",
    [
        ("float16", "float32", "float16", dict()),
        ("int8", "int32", "int32", dict(a_transposed=True, b_transposed=False, chunk=64)),
        ("bfloat16", "float32", "float32", dict(b_transposed=False, warp_tile=(32, 8), tile_copies=True)),
    ],
)
def test_nvcc_compiles(arch, dtype, accum, out, kw):
    k = tilelang.compile(gemm(256, 256, 256, dtype, accum, out, **kw), target=arch)
    cuda.compile_object(k.get_kernel_source(), k.target)


def test_eager_kernel_compiles(monkeypatch):
    monkeypatch.setenv("TILELANG_DEFAULT_TARGET", "sm_80")  # no GPU to ask here
    k = eager_gemm.compile(M=256, N=256, K=128, dtype=T.float16, accum=T.float32, out_dtype=T.float32)
    src = k.get_kernel_source()
    assert "tl::mma_sync<16>(" in src and "tl::ldmatrix<4, false>(" in src
