"""T.gemm on sm_90a through wgmma: when it is chosen (and when mma.sync stays), the register and
shared layouts it imposes, and the generated code compiling with nvcc (no GPU needed)."""

import re

import numpy as np
import pytest
import tvm_ffi
from test_gemm import _gemm_kernel  # the same small kernels as the mma.sync tests
from tvm import tirx

import tilelang
import tilelang.language as T
from tilelang.codegen import cuda
from tilelang.engine.pipeline import lower
from tilelang.errors import UserError
from tilelang.layout import layout as sl
from tilelang.layout.evaluate import evaluate, grid
from tilelang.op import gemm as gemm_op
from tilelang.op.gemm import wgmma as gemm_wgmma
from tilelang.options import CompileOptions
from tilelang.utils.target import determine_target

SM90 = determine_target("sm_90a")


def _gemm(func):
    found = []

    def on_eval(e):
        if gemm_op.base.is_tile_op(e.value, "gemm"):
            found.append(gemm_op.Gemm(e.value))

    tvm_ffi.structural_walk(func.body, [(tirx.Evaluate, on_eval)])
    return found[0]


@pytest.mark.parametrize(
    "M,N,threads,policy,expect",
    [
        (128, 128, 128, 0, (1, 1)),
        (128, 128, 256, 0, (2, 1)),
        (64, 128, 256, 0, (1, 2)),  # one 64-row instruction: the warpgroups split N
        (128, 256, 256, 2, (1, 2)),  # FullCol prefers splitting N
        (256, 128, 512, 1, (4, 1)),
    ],
)
def test_warpgroup_partition(M, N, threads, policy, expect):
    p = gemm_wgmma.plan(_gemm(_gemm_kernel(M, N, 64, policy=policy, threads=threads)), SM90, threads)
    assert (p.wg_m, p.wg_n) == expect


@pytest.mark.parametrize(
    "why,kwargs,target,config",
    [
        ("not Hopper", {}, "sm_80", {}),
        ("switched off", {}, "sm_90a", {"tl.disable_wgmma": True}),
        ("tf32 reads B K-major only", {"dtype": "float32", "accum": "float32"}, "sm_90a", {}),
        ("tf32 A in registers, B K-major only", {"dtype": "float32", "accum": "float32", "kind": "rs"}, "sm_90a", {}),
        ("fp8 reads B K-major only", {"dtype": "float8_e4m3fn", "accum": "float32"}, "sm_90a", {}),
        ("int8 with A in registers", {"dtype": "int8", "accum": "int32", "kind": "rs", "trans_b": True}, "sm_90a", {}),
        ("fp16 into bf16 has no path", {"dtype": "float16", "accum": "bfloat16"}, "sm_90a", {}),
        ("B in registers", {"kind": "sr"}, "sm_90a", {}),
        ("fewer than 64 rows", {"M": 32}, "sm_90a", {}),
        ("not whole warpgroups", {"threads": 64}, "sm_90a", {}),
    ],
)
def test_mma_sync_stays_when_wgmma_cannot_run(why, kwargs, target, config):
    args = {"M": 128, "N": 128, "K": 64, **kwargs}
    threads = args.pop("threads", 128)
    g = _gemm(_gemm_kernel(args.pop("M"), args.pop("N"), args.pop("K"), threads=threads, **args))
    options = CompileOptions.from_pass_configs(config)
    assert gemm_wgmma.plan(g, determine_target(target), threads, options) is None, why


def test_c_fragment_is_a_bijection_and_feeds_the_next_gemm_as_a():
    """Flash attention: S = Q·Kᵀ accumulates in C's layout, then S (cast) is the A operand of P·V."""
    g1 = _gemm(_gemm_kernel(128, 64, 128, trans_b=True, threads=256))
    g2 = _gemm(_gemm_kernel(128, 128, 64, kind="rs", threads=256))
    p1, p2 = gemm_wgmma.plan(g1, SM90, 256), gemm_wgmma.plan(g2, SM90, 256)
    c = gemm_wgmma.c_fragment(g1, p1, 256)
    a = gemm_wgmma.a_fragment(g2, p2, 256)
    assert c.is_injective() and c.local_size == 128 * 64 // 256
    i, j = grid((128, 64))
    for f in (c, a):
        assert sorted(np.bincount(evaluate(f.base, {f.vars[0]: i, f.vars[1]: j})).tolist()) == [32] * 256
    ct, ci = (evaluate(e, {c.vars[0]: i, c.vars[1]: j}) for e in (c.base, c.index))
    at, ai = (evaluate(e, {a.vars[0]: i, a.vars[1]: j}) for e in (a.base, a.index))
    assert np.array_equal(ct, at) and np.array_equal(ci, ai)


def test_tf32_a_in_registers_runs_on_wgmma_in_cutes_register_layout():
    """wgmma.m64nNk8 reads a tf32 A from four 32-bit registers per thread (PTX ISA, register fragments
    of wgmma .m64nNk8; CuTe's ALayout_64x8): in each warp's 16 rows, lane 4 * (r % 8) + k % 4 holds
    a0..a3 = (r, k), (r + 8, k), (r, k + 4), (r + 8, k + 4) of every 8 columns of K."""
    g = _gemm(_gemm_kernel(128, 64, 32, dtype="float32", accum="float32", kind="rs", trans_b=True, threads=256))
    p = gemm_wgmma.plan(g, SM90, 256)
    assert p == gemm_wgmma.Plan(2, 1, 0, 3)
    a = gemm_wgmma.a_fragment(g, p, 256)
    m, k = grid((128, 32))
    thread, index = (evaluate(e, {a.vars[0]: m, a.vars[1]: k}) for e in (a.base, a.index))
    rr = m % 64  # each warpgroup its 64 rows (one instruction along M), all of K
    lane = 4 * (rr % 8) + k % 4
    reg = (rr % 16) // 8 + 2 * ((k % 8) // 4)
    assert np.array_equal(thread, (m // 64) * 128 + (rr // 16) * 32 + lane)
    assert np.array_equal(index, (k // 8) * 4 + reg)  # four registers per 8 of K
    assert a.local_size == 128 * 32 // 256
    # The same gemm with B not K-major stays mma.sync: wgmma transposes only 16-bit operands.
    g = _gemm(_gemm_kernel(128, 64, 32, dtype="float32", accum="float32", kind="rs", threads=256))
    assert gemm_wgmma.plan(g, SM90, 256) is None


def test_tf32_a_in_registers_compiles_with_wgmma_rs():
    k = tilelang.compile(
        _gemm_kernel(128, 64, 32, dtype="float32", accum="float32", kind="rs", trans_b=True, threads=256),
        target="sm_90a",
    )
    src = k.get_kernel_source()
    assert "tl::wgmma_rs<128, 64, 32, 2, 1, false, true" in src
    cuda.compile_object(src, k.target)


def _tf32_and_bf16_gemms_summed(threads=128):
    """C = A1 @ B1^T (tf32, A1 in registers) + A2^T @ B2 (bf16), summed in one T.Parallel loop: the
    loop needs both accumulators in one register layout, so both gemms must run on the same
    instruction (a chunked-delta backward's dh update)."""

    @T.prim_func
    def main(
        A1: T.Tensor((128, 64), "float32"),
        B1: T.Tensor((32, 64), "float32"),
        A2: T.Tensor((64, 128), "bfloat16"),
        B2: T.Tensor((64, 32), "bfloat16"),
        C: T.Tensor((128, 32), "float32"),
    ):
        with T.Kernel(1, threads=threads):
            A1_f = T.alloc_fragment((128, 64), "float32")
            B1_s = T.alloc_shared((32, 64), "float32")
            A2_s = T.alloc_shared((64, 128), "bfloat16")
            B2_s = T.alloc_shared((64, 32), "bfloat16")
            C1_f = T.alloc_fragment((128, 32), "float32")
            C2_f = T.alloc_fragment((128, 32), "float32")
            T.copy(A1, A1_f)
            T.copy(B1, B1_s)
            T.copy(A2, A2_s)
            T.copy(B2, B2_s)
            T.gemm(A1_f, B1_s, C1_f, transpose_B=True, clear_accum=True)
            T.gemm(A2_s, B2_s, C2_f, transpose_A=True, clear_accum=True)
            for i, j in T.Parallel(128, 32):
                C1_f[i, j] = C1_f[i, j] - C2_f[i, j]
            T.copy(C1_f, C)

    return main


def test_tf32_gemm_in_registers_and_bf16_gemm_share_the_accumulator_layout():
    # The tf32 gemm stayed mma.sync (no A-in-registers tf32 wgmma) while the bf16 one ran on wgmma:
    # layout inference stopped at the loop ("need different layouts").
    k = tilelang.compile(_tf32_and_bf16_gemms_summed(), target="sm_90a")
    src = k.get_kernel_source()
    assert "tl::wgmma_rs<128, 32, 64, 1, 1, false, true" in src and "tl::wgmma_ss<128, 32, 64, 1, 1, true, false" in src
    cuda.compile_object(src, k.target)


@pytest.mark.parametrize("shape,bits", [((64, 64), 3), ((2, 64, 128), 3), ((128, 32), 2), ((64, 16), 1)])
def test_gmma_panels_is_the_swizzle_inside_each_panel(shape, bits):
    lay = sl.gmma_panels(shape, 16, bits)
    assert lay.is_bijective()
    rows, cols, panel = shape[-2], shape[-1], 8 << bits
    inner = sl.swizzle((rows, panel), 16, bits)
    r, c = grid((rows, cols))
    lead = [np.zeros_like(r)] * (len(shape) - 2)
    got = evaluate(lay.forward, dict(zip(lay.vars, [*lead, r, c])))
    want = (c // panel) * rows * panel + evaluate(inner.forward, {inner.vars[0]: r, inner.vars[1]: c % panel})
    assert np.array_equal(got, want)


@pytest.mark.parametrize("trans_a,trans_b", [(False, False), (False, True), (True, False), (True, True)])
def test_generated_code_calls_wgmma_and_compiles(trans_a, trans_b):
    k = tilelang.compile(_gemm_kernel(128, 128, 64, trans_a=trans_a, trans_b=trans_b, threads=256), target="sm_90a")
    src = k.get_kernel_source()
    assert "tl::wgmma_ss<128, 128, 64, 2, 1" in src and "fence" not in k.get_host_source()
    cuda.compile_object(src, k.target)


@pytest.mark.parametrize("kind", ["ss", "rs"])
def test_the_kernel_source_defines_the_wgmma_instructions_it_issues(kind):
    # N = 176 per warpgroup (flash attention's block_N for d128), beside the kernel's other shapes only.
    k = tilelang.compile(_gemm_kernel(128, 176, 64, trans_b=True, kind=kind, threads=256), target="sm_90a")
    src = k.get_kernel_source()
    assert f"tl::wgmma_{kind}<128, 176, 64, 2, 1" in src
    assert re.findall(r"struct Instr<[^>]*>", src) == ["struct Instr<176, half, float>"]
    assert ("static void rs(" in src) == (kind == "rs") and "wgmma.mma_async.sync.aligned.m64n176k16.f32.f16.f16" in src
    assert "cute" not in src
    cuda.compile_object(src, k.target)


def test_extended_n_is_for_16_bit_types_only():
    g = _gemm(_gemm_kernel(128, 176, 64, dtype="float8_e4m3fn", accum="float32", trans_b=True, threads=128))
    assert gemm_wgmma.plan(g, SM90, 128) is None
    g = _gemm(_gemm_kernel(128, 176, 64, dtype="bfloat16", trans_b=True, threads=128))
    assert gemm_wgmma.plan(g, SM90, 128) is not None


def test_the_warpgroup_index_is_read_once_per_kernel():
    # A warp shuffle tells the compiler the index is warp-uniform (descriptors stay in uniform
    # registers); read once at the kernel's start, its latency is not paid before every gemm.
    k = tilelang.compile(_gemm_kernel(128, 128, 64, threads=256), target="sm_90a")
    src = k.get_kernel_source()
    assert src.count("tl::warpgroup_index()") == 1
    assert src.index("int warpgroup = tl::warpgroup_index();") < src.index("tl::wgmma_ss<")
    assert re.search(r"tl::wgmma_ss<[^>]*>\([^;]*, warpgroup\);", src)


def test_alignment_check_sees_every_descriptor_operand(monkeypatch):
    from tilelang.transform import check_descriptor_alignment as check

    seen = []
    original = check._offset_bytes
    monkeypatch.setattr(check, "_offset_bytes", lambda p: seen.append(original(p)) or seen[-1])
    lower(_gemm_kernel(128, 128, 64, threads=256), SM90)  # (not tilelang.compile: its cache may skip lowering)
    assert len(seen) == 2 and all(offset is not None for offset, _ in seen)


def test_the_log_says_when_an_mn_major_b_would_split_inside_a_panel(caplog):
    """64 rows, 2 warpgroups side by side over a (K, 64) B of 64-column (128-byte) panels: each would
    take 32 columns, half a panel. The debug log says so (it used to say no split fits the sizes)."""
    g = _gemm(_gemm_kernel(64, 64, 64, threads=256))
    with caplog.at_level("DEBUG", logger="tilelang"):
        assert gemm_wgmma.plan(g, SM90, 256) is None
    assert "split its 64 columns into 32 each, not whole panels" in caplog.text


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_a_transposed_in_registers_is_the_users_error_on_hopper_too(dtype):
    """A (K, M) fragment with transpose_A: wgmma_rs reads A as (M, K), so the plan leaves it to mma.sync,
    which names it at the user's T.gemm line (the GPU fuzzer found it reaching nvcc's static_assert)."""
    g = _gemm(_gemm_kernel(128, 128, 64, dtype=dtype, trans_a=True, kind="rs"))
    assert gemm_wgmma.plan(g, SM90, 128) is None
    with pytest.raises(UserError, match="an A operand in registers cannot be transposed") as err:
        tilelang.compile(_gemm_kernel(128, 128, 64, dtype=dtype, trans_a=True, kind="rs"), target="sm_90a")
    assert "-->" in str(err.value) and "T.gemm(A_s, B_s, C_f, trans_a, trans_b" in str(err.value)
