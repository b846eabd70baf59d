"""T.gemm on the CPU: instruction selection, warp partition, register layouts, errors, and nvcc."""

import re

import numpy as np
import pytest

import tilelang
import tilelang.language as T
from tilelang.codegen import cuda
from tilelang.errors import UserError
from tilelang.layout.evaluate import evaluate, grid
from tilelang.op import gemm as gemm_op
from tilelang.op.gemm import instructions as inst
from tilelang.op.gemm import policy as policy_mod
from tilelang.op.gemm import selection
from tilelang.testing import assert_points_at
from tilelang.utils.target import determine_target


@pytest.mark.parametrize(
    "a,c,arch,k",
    [
        ("float16", "float32", "sm_80", 16),
        ("float16", "float16", "sm_80", 16),
        ("bfloat16", "float32", "sm_89", 16),
        ("float32", "float32", "sm_80", 8),
        ("int8", "int32", "sm_80", 32),
        ("float8_e4m3fn", "float32", "sm_89", 32),
        ("float8_e5m2", "float32", "sm_90a", 32),
    ],
)
def test_instruction_selection(a, c, arch, k):
    assert inst.select(determine_target(arch), a, a, c).k == k


def test_fp8_needs_sm89():
    # raised at the call: the traceback shows the user's line
    with pytest.raises(UserError, match="no tensor-core instruction on sm_80 multiplies float8_e4m3fn"):
        inst.select(determine_target("sm_80"), "float8_e4m3fn", "float8_e4m3fn", "float32")


@pytest.mark.parametrize(
    "policy,expect",
    [
        (gemm_op.GemmWarpPolicy.FullRow, (4, 1)),
        (gemm_op.GemmWarpPolicy.FullCol, (1, 4)),
        (gemm_op.GemmWarpPolicy.Square, (2, 2)),
    ],
)
def test_warp_partition_policies(policy, expect):
    assert policy_mod.warp_partition(128, 128, 4, policy) == expect


def test_warp_partition_error_names_the_constraint():
    # raised at the call: the traceback shows the user's line
    with pytest.raises(UserError, match="cannot tile a 24 x 128 output"):
        policy_mod.warp_partition(24, 128, 4, gemm_op.GemmWarpPolicy.Square)


def _gemm_kernel(
    M, N, K, dtype="float16", accum="float32", trans_a=False, trans_b=False, policy=0, kind="ss", threads=128
):
    a_shape = (K, M) if trans_a else (M, K)
    b_shape = (N, K) if trans_b else (K, N)

    @T.prim_func
    def main(A: T.Tensor(a_shape, dtype), B: T.Tensor(b_shape, dtype), C: T.Tensor((M, N), accum)):
        with T.Kernel(1, threads=threads):
            A_s = T.alloc_shared(a_shape, dtype) if kind[0] == "s" else T.alloc_fragment(a_shape, dtype)
            B_s = T.alloc_shared(b_shape, dtype) if kind[1] == "s" else T.alloc_fragment(b_shape, dtype)
            C_f = T.alloc_fragment((M, N), accum)
            T.copy(A, A_s)
            T.copy(B, B_s)
            T.gemm(A_s, B_s, C_f, trans_a, trans_b, policy=policy, clear_accum=True)
            T.copy(C_f, C)

    return main


def _layouts(func, target="sm_80"):
    g = None

    import tvm_ffi
    from tvm import tirx

    def on_eval(e):
        nonlocal g
        if gemm_op.base.is_tile_op(e.value, "gemm"):
            g = gemm_op.Gemm(e.value)

    tvm_ffi.structural_walk(func.body, [(tirx.Evaluate, on_eval)])
    plan = selection.select(g, determine_target(target), 128)  # what select_gemm_instructions records
    g = gemm_op.Gemm(selection.record(g.call, plan))
    return g, gemm_op.layouts(g, 128)


@pytest.mark.parametrize("policy", [0, 1, 2])
def test_c_layout_is_a_bijection_onto_the_warp_registers(policy):
    g, lay = _layouts(_gemm_kernel(64, 64, 32, policy=policy))
    frag = lay[g.c.buffer]
    assert frag.is_injective() and frag.local_size == 64 * 64 // 128
    base, _ = frag.tables()
    assert sorted(np.bincount(base).tolist()) == [32] * 128  # every thread holds 32 elements


def test_fragment_a_lives_where_the_c_of_a_previous_gemm_does():
    # The flash-attention chain: S = Q K^T in registers, cast, then O += S V with S as the A operand.
    g, lay = _layouts(_gemm_kernel(64, 64, 64, kind="rs", policy=1))
    a_frag = lay[g.a.buffer]
    _, c_lay = _layouts(_gemm_kernel(64, 64, 64, policy=1))
    c_frag = next(iter(v for k, v in c_lay.items() if k.name == "C_f"))
    i, j = grid((64, 64))
    a_thread = evaluate(a_frag.base, {a_frag.vars[0]: i, a_frag.vars[1]: j})
    c_thread = evaluate(c_frag.base, {c_frag.vars[0]: i, c_frag.vars[1]: j})
    assert np.array_equal(a_thread, c_thread)


def test_k_not_a_multiple_of_the_instruction_is_reported():
    with pytest.raises(UserError, match="K = 8 is not a multiple of 16") as err:
        tilelang.compile(_gemm_kernel(64, 64, 8), target="sm_80")
    assert_points_at(err, "T.gemm(A_s, B_s, C_f, trans_a, trans_b")


def test_shapes_must_chain():
    with pytest.raises(Exception, match="shapes do not chain"):

        @T.prim_func
        def main(A: T.Tensor((64, 32), "float16")):
            with T.Kernel(1, threads=128):
                a = T.alloc_shared((64, 32), "float16")
                b = T.alloc_shared((16, 64), "float16")
                c = T.alloc_fragment((64, 64), "float32")
                T.gemm(a, b, c)


@pytest.mark.parametrize(
    "dtype,accum,arch",
    [
        ("float16", "float32", "sm_80"),
        ("bfloat16", "float32", "sm_89"),
        ("float32", "float32", "sm_80"),
        ("int8", "int32", "sm_90a"),
        ("float8_e4m3fn", "float32", "sm_89"),
        ("float8_e5m2", "float32", "sm_90a"),
        ("float32", "float32", "sm_90a"),
        ("float16", "float16", "sm_90a"),
    ],
)
def test_gemm_compiles_with_nvcc(dtype, accum, arch):
    k = tilelang.compile(_gemm_kernel(64, 64, 64, dtype, accum, trans_b=True), target=arch)
    # On sm_90a every type goes through wgmma here (B is K-major; testing/python/op/test_gemm_wgmma.py).
    wgmma = arch == "sm_90a"
    assert ("tl::wgmma_ss<64, 64, 64" if wgmma else "tl::gemm_ss<64, 64, 64") in k.get_kernel_source()
    cuda.compile_object(k.get_kernel_source(), k.target)


@pytest.mark.parametrize("trans_a,trans_b", [(False, False), (True, False), (False, True), (True, True)])
def test_32_bit_shared_operands_are_swizzled_in_16_byte_chunks(trans_a, trans_b):
    """A tf32 tile of 32-float rows read one element a lane: 8 rows of one column fall in one bank
    unswizzled; the chunk XOR row swizzle (4 floats a chunk) spreads them, in the layout the copies
    write and in the template's reads (gemm_mma.h swizzle16<Bits, Ld, 4>)."""
    from types import SimpleNamespace

    from tvm import tirx

    from tilelang.layout import layout as sl
    from tilelang.op.gemm import mma

    tile = tirx.decl_buffer((64, 32), "float32", "A_s", scope="shared.dyn")
    assert mma.swizzle_bits(SimpleNamespace(buffer=tile)) == 3
    lay = sl.swizzle((64, 32), 32, 3)
    # Lane g of an mma reads row g of one column: 8 rows, 8 different 16-byte chunks.
    offsets = evaluate(lay.forward, dict(zip(lay.vars, [np.arange(8), np.zeros(8, dtype=np.int64)])))
    assert len({int(o) // 4 % 8 for o in offsets}) == 8
    k = tilelang.compile(_gemm_kernel(64, 64, 32, "float32", trans_a=trans_a, trans_b=trans_b), target="sm_80")
    src = k.get_kernel_source()
    assert re.search(r"tl::gemm_ss<64, 64, 32, [^>]*, 3, 3(, \d+)*>", src), src
    cuda.compile_object(src, k.target)


@pytest.mark.parametrize("kind", ["rs", "sr"])
def test_register_operand_variants_compile(kind):
    k = tilelang.compile(_gemm_kernel(64, 64, 32, kind=kind), target="sm_80")
    assert f"tl::gemm_{kind}<" in k.get_kernel_source()
    cuda.compile_object(k.get_kernel_source(), k.target)


@pytest.mark.parametrize("kind,policy", [("rs", 0), ("rs", 1), ("sr", 0), ("sr", 2)])
def test_register_operand_layouts_fill_the_registers_the_template_reads(kind, policy):
    g, lay = _layouts(_gemm_kernel(64, 64, 32, kind=kind, policy=policy))
    frag = lay[g.a.buffer] if kind == "rs" else lay[g.b.buffer]
    wm, wn = policy_mod.warp_partition(64, 64, 4, gemm_op.GemmWarpPolicy(policy))
    rows = 64 // wm if kind == "rs" else 64 // wn  # the operand rows (A) or columns (B) of one warp
    assert frag.is_injective() and frag.local_size == rows * 32 // 32
    assert frag.replicate == (wn if kind == "rs" else wm)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_clear_accum_may_be_a_run_time_condition(arch):
    # clear_accum=k == 0: the first iteration starts from zero, no T.clear before the loop.
    @T.prim_func
    def main(
        A: T.Tensor((128, 256), "float16"), B: T.Tensor((256, 128), "float16"), C: T.Tensor((128, 128), "float32")
    ):
        with T.Kernel(1, threads=128):
            a = T.alloc_shared((128, 64), "float16")
            b = T.alloc_shared((64, 128), "float16")
            c = T.alloc_fragment((128, 128), "float32")
            for k in T.Pipelined(4, num_stages=2):
                T.copy(A[0, k * 64], a)
                T.copy(B[k * 64, 0], b)
                T.gemm(a, b, c, clear_accum=k == 0)
            T.copy(c, C)

    kernel = tilelang.compile(main, target=arch)
    src = kernel.get_kernel_source()
    calls = [line for line in src.splitlines() if "tl::gemm_ss<" in line or "tl::wgmma_ss<" in line]
    assert calls and all("== 0)" in line.rsplit(",", 1)[1] for line in calls), calls
    cuda.compile_object(src, kernel.target)
