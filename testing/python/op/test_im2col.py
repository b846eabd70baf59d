"""`T.im2col`: the index map against a numpy im2col, the call's checks, the loop it expands to, and
a convolution kernel compiled with nvcc for sm_80 and sm_90a."""

import itertools

import numpy as np
import pytest
import tvm_ffi
from tvm import tirx

import tilelang
import tilelang.language as T
from tilelang.codegen import cuda
from tilelang.layout.evaluate import evaluate
from tilelang.op import base
from tilelang.op import im2col as im2col_op
from tilelang.op.loops import is_parallel


def _numpy_im2col(img, kernel, stride, dilation, pad):
    """The (N * OH * OW, KH * KW * C) matrix, rows (n, oh, ow) and columns (kh, kw, c)."""
    n, h, w, c = img.shape
    oh = (h + 2 * pad - dilation * (kernel - 1) - 1) // stride + 1
    ow = (w + 2 * pad - dilation * (kernel - 1) - 1) // stride + 1
    padded = np.pad(img, ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    out = np.zeros((n, oh, ow, kernel, kernel, c), img.dtype)
    for kh, kw in itertools.product(range(kernel), range(kernel)):
        rows = padded[:, kh * dilation : kh * dilation + stride * (oh - 1) + 1 : stride]
        out[:, :, :, kh, kw] = rows[:, :, kw * dilation : kw * dilation + stride * (ow - 1) + 1 : stride]
    return out.reshape(n * oh * ow, kernel * kernel * c)


@pytest.mark.parametrize("kernel, stride, dilation, pad", [(3, 1, 1, 1), (3, 2, 1, 0), (2, 1, 2, 2), (1, 1, 1, 0)])
def test_index_map_matches_numpy_im2col(kernel, stride, dilation, pad):
    shape = (2, 7, 5, 3)
    img = np.arange(1, np.prod(shape) + 1).reshape(shape)
    ref = _numpy_im2col(img, kernel, stride, dilation, pad)
    rows, cols = ref.shape
    m, k = tirx.Var("m", "int32"), tirx.Var("k", "int32")
    index, inside = im2col_op.source_index(m, k, shape, kernel, stride, dilation, pad)
    grid_m, grid_k = np.meshgrid(np.arange(rows + 5), np.arange(cols + 3), indexing="ij")  # past both edges
    points = {m: grid_m, k: grid_k}
    ok = evaluate(inside, points).astype(bool)
    n, h, w, c = (evaluate(e, points) for e in index)
    got = np.zeros(grid_m.shape, img.dtype)
    got[ok] = img[n[ok], h[ok], w[ok], c[ok]]
    assert np.array_equal(got[:rows, :cols], ref)
    assert not got[rows:].any() and not got[:, cols:].any()  # past the matrix: zeros


def _conv(N=2, C=32, H=16, W=16, F=64, K=3, S=1, D=1, P=1, block_M=64, block_N=64, block_K=32, stages=2):
    OH = (H + 2 * P - D * (K - 1) - 1) // S + 1
    OW = (W + 2 * P - D * (K - 1) - 1) // S + 1

    @T.prim_func
    def conv(
        data: T.Tensor((N, H, W, C), "float16"),
        kernel: T.Tensor((K, K, C, F), "float16"),
        out: T.Tensor((N, OH, OW, F), "float16"),
    ):
        with T.Kernel(T.ceildiv(F, block_N), T.ceildiv(N * OH * OW, block_M), threads=128) as (bx, by):
            data_shared = T.alloc_shared((block_M, block_K), "float16")
            kernel_shared = T.alloc_shared((block_K, block_N), "float16")
            out_local = T.alloc_fragment((block_M, block_N), "float32")
            kernel_flat = T.Tensor((K * K * C, F), "float16", kernel.data)
            out_flat = T.Tensor((N * OH * OW, F), "float16", out.data)
            T.clear(out_local)
            for k in T.Pipelined(T.ceildiv(K * K * C, block_K), num_stages=stages):
                T.im2col(data, data_shared, by, k, K, S, D, P)
                T.copy(kernel_flat[k * block_K, bx * block_N], kernel_shared)
                T.gemm(data_shared, kernel_shared, out_local)
            T.copy(out_local, out_flat[by * block_M, bx * block_N])

    return conv


def test_call_records_the_convolution():
    (stmt,) = _evals(_conv(K=3, S=2, D=1, P=1))
    op = base.parse(stmt)
    assert (op.kernel, op.stride, op.dilation, op.pad) == (3, 2, 1, 1)
    assert op.src.name == "data" and op.dst.name == "data_shared"


def _evals(func):
    out = []
    tvm_ffi.structural_walk(func.body, [(tirx.Evaluate, out.append)], order="pre")
    return [s for s in out if isinstance(base.parse(s), im2col_op.Im2Col)]


def test_expands_to_a_parallel_loop_over_the_tile():
    (stmt,) = _evals(_conv())
    loop = base.parse(stmt).expand()
    assert is_parallel(loop) and is_parallel(loop.body)
    assert [int(loop.extent), int(loop.body.extent)] == [64, 32]
    store = loop.body.body
    assert store.buffer.name == "data_shared" and "if_then_else" in str(store.value)


@pytest.mark.parametrize(
    "args, message",
    [
        (lambda d, s, f: (f, s), "the image 'f' must be a 4-D NHWC tensor"),
        (lambda d, s, f: (d, d), "the destination 'data' must be a shared tile or a fragment"),
        (lambda d, s, f: (d, s, 0, 0, 0, 1, 1, 0), "`kernel` must be at least 1"),
        (lambda d, s, f: (d, s, 0, 0, 3, 1, 1, -1), "`pad` must be at least 0"),
        (lambda d, s, f: (d, s, 0, 0, 3.0, 1, 1, 0), "`kernel` must be a compile-time integer"),
        (lambda d, s, f: (d, s, 0.5, 0, 3, 1, 1, 0), "`nhw_step` must be an integer"),
    ],
)
def test_mistakes(args, message):
    def full(a):
        return a if len(a) == 8 else (*a, 0, 0, 3, 1, 1, 1)

    with pytest.raises(Exception, match=message):

        @T.prim_func
        def main(data: T.Tensor((1, 8, 8, 16), "float16")):
            with T.Kernel(1, threads=128):
                s = T.alloc_shared((64, 32), "float16")
                f = T.alloc_shared((64, 32), "float16")
                T.im2col(*full(args(data, s, f)))


def test_eviction_policy_is_checked():
    with pytest.raises(Exception, match="eviction_policy must be one of"):

        @T.prim_func
        def main(data: T.Tensor((1, 8, 8, 16), "float16")):
            with T.Kernel(1, threads=128):
                s = T.alloc_shared((64, 32), "float16")
                T.im2col(data, s, 0, 0, 3, 1, 1, 1, eviction_policy="keep")


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("stages", [1, 3])
def test_convolution_compiles(arch, stages):
    kernel = tilelang.compile(_conv(stages=stages), target=arch)
    src = kernel.get_kernel_source()
    cuda.compile_object(src, kernel.target, host_src=kernel.get_host_source())
    assert "tl::gemm_ss" in src or "tl::wgmma_ss" in src
    # 8 channels at a time; a pipelined loop issues them ahead with cp.async (zero-filling the padding).
    assert ("tl::cp_async<16>((&(((half*)buf_dyn_shmem_ptr)" in src and "(&(data_ptr[" in src) == (stages > 1)
    assert ("*(uint4*)(data_ptr" in src) == (stages == 1)
