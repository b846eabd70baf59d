"""Buffers over other memory, on the GPU against torch: views (`T.reshape`, `T.view`,
`T.Tensor(shape, dtype, X.data)`), tensors at device addresses (`T.make_tensor`), and global
workspaces (`T.alloc_global`)."""

import pytest
import torch

import tilelang
import tilelang.language as T

pytestmark = pytest.mark.gpu


def _rand(*shape, dtype=torch.float16):
    return torch.randn(*shape, device="cuda").to(dtype)


# ---- views ------------------------------------------------------------------------------------------


def test_global_views_read_and_write_the_tensor():
    @T.prim_func
    def main(A: T.Tensor((8, 4, 16), "float16"), Out: T.Tensor((512,), "float16")):
        with T.Kernel(1, threads=128):
            flat = T.reshape(A, (32, 16))
            out2d = T.Tensor((32, 16), "float16", Out.data)
            for i, j in T.Parallel(32, 16):
                out2d[i, j] = flat[i, j] * 2.0

    a = _rand(8, 4, 16)
    out = torch.empty(512, dtype=torch.float16, device="cuda")
    tilelang.compile(main)(a, out)
    torch.testing.assert_close(out, a.reshape(-1) * 2)


def test_view_of_a_global_tensor_reads_its_bits():
    @T.prim_func
    def main(A: T.Tensor((64, 64), "float16"), B: T.Tensor((64, 32), "int32")):
        with T.Kernel(1, threads=128):
            words = T.view(A, shape=(64, 32), dtype="int32")
            for i, j in T.Parallel(64, 32):
                B[i, j] = words[i, j]

    a = _rand(64, 64)
    b = tilelang.compile(main, out_idx=[-1])(a)
    assert torch.equal(b, a.view(torch.int32))


def test_shared_tile_written_and_read_as_another_dtype():
    @T.prim_func
    def main(A: T.Tensor((64, 64), "float16"), B: T.Tensor((64, 64), "float16")):
        with T.Kernel(1, threads=128):
            s = T.alloc_shared((64, 64), "float16")
            words = T.view(s, shape=(64, 32), dtype="int32")
            T.copy(A, s)
            for i, j in T.Parallel(64, 32):
                words[i, j] = words[i, j] ^ -2147450880  # 0x80008000: flips the sign of both halves
            T.copy(s, B)

    a = _rand(64, 64)
    b = tilelang.compile(main, out_idx=[-1])(a)
    assert torch.equal(b, -a)


def test_view_with_dynamic_shape():
    m = T.dynamic("m")

    @T.prim_func
    def main(A: T.Tensor((m, 64), "float32"), B: T.Tensor((m * 64,), "float32")):
        with T.Kernel(T.ceildiv(m * 64, 256), threads=256) as bx:
            flat = T.reshape(A, (m * 64,))
            for i in T.Parallel(256):
                if bx * 256 + i < m * 64:
                    B[bx * 256 + i] = flat[bx * 256 + i] + 1.0

    kernel = tilelang.compile(main, out_idx=[-1])
    for rows in (3, 100):
        a = _rand(rows, 64, dtype=torch.float32)
        torch.testing.assert_close(kernel(a), a.reshape(-1) + 1)


def test_conv_filter_seen_as_a_matrix():
    """A (KH, KW, C, F) filter read by pipelined tiles of its (KH * KW * C, F) view."""

    @T.prim_func
    def main(Wt: T.Tensor((3, 3, 64, 64), "float16"), O: T.Tensor((32, 64), "float32")):
        with T.Kernel(1, threads=128):
            flat = T.Tensor((576, 64), "float16", Wt.data)
            s = T.alloc_shared((32, 64), "float16")
            acc = T.alloc_fragment((32, 64), "float32")
            T.clear(acc)
            for k in T.Pipelined(18, num_stages=3):
                T.copy(flat[k * 32, 0], s)
                for i, j in T.Parallel(32, 64):
                    acc[i, j] += s[i, j]
            T.copy(acc, O)

    w = _rand(3, 3, 64, 64)
    o = tilelang.compile(main, out_idx=[-1])(w)
    torch.testing.assert_close(o, w.reshape(18, 32, 64).float().sum(0), rtol=1e-3, atol=1e-3)


def test_fragment_reshape_of_a_gemm_accumulator():
    @T.prim_func
    def main(A: T.Tensor((64, 64), "float16"), B: T.Tensor((64, 64), "float16"), C: T.Tensor((64, 8), "float32")):
        with T.Kernel(1, threads=128):
            a = T.alloc_shared((64, 64), "float16")
            b = T.alloc_shared((64, 64), "float16")
            s = T.alloc_fragment((64, 64), "float32")
            s3 = T.reshape(s, (64, 8, 8))
            r = T.alloc_fragment((64, 8), "float32")
            T.copy(A, a)
            T.copy(B, b)
            T.gemm(a, b, s, clear_accum=True)
            for i, j, h in T.Parallel(64, 8, 8):
                s3[i, j, h] = T.max(s3[i, j, h], 0.0)
            T.reduce_sum(s3, r, dim=-1)
            T.copy(r, C)

    a, b = _rand(64, 64), _rand(64, 64)
    c = tilelang.compile(main, out_idx=[-1])(a, b)
    ref = torch.relu(a.float() @ b.float()).reshape(64, 8, 8).sum(-1)
    torch.testing.assert_close(c, ref, rtol=1e-2, atol=1e-2)


def test_shared_view_of_a_tile_the_gemm_reads():
    """b is swizzled for the gemm; after it, the same memory holds fp32 rows written through a view."""

    @T.prim_func
    def main(A: T.Tensor((64, 64), "float16"), B: T.Tensor((64, 64), "float16"), C: T.Tensor((32, 64), "float32")):
        with T.Kernel(1, threads=128):
            a = T.alloc_shared((64, 64), "float16")
            b = T.alloc_shared((64, 64), "float16")
            acc = T.alloc_fragment((64, 64), "float32")
            v = T.view(b, shape=(32, 64), dtype="float32")
            T.copy(A, a)
            T.copy(B, b)
            T.gemm(a, b, acc, clear_accum=True)
            for i, j in T.Parallel(64, 64):
                if i < 32:
                    v[i, j] = acc[i, j]
            for i, j in T.Parallel(32, 64):
                C[i, j] = v[i, j]

    a, b = _rand(64, 64), _rand(64, 64)
    c = tilelang.compile(main, out_idx=[-1])(a, b)
    torch.testing.assert_close(c, (a.float() @ b.float())[:32], rtol=1e-2, atol=1e-2)


# ---- tensors at device addresses ------------------------------------------------------------------------


def test_make_tensor_from_a_pointer_table():
    groups = 3

    @T.prim_func
    def main(P: T.Tensor((groups,), T.ptr), Out: T.Tensor((groups, 256, 64), "float16")):
        with T.Kernel(groups, threads=128) as bx:
            A = T.make_tensor(P[bx], (256, 64), "float16")
            s = T.alloc_shared((64, 64), "float16")
            for k in T.Pipelined(4, num_stages=2):
                T.copy(A[k * 64, 0], s)
                for i, j in T.Parallel(64, 64):
                    Out[bx, k * 64 + i, j] = s[i, j] * 2.0

    tensors = [_rand(256, 64) for _ in range(groups)]
    table = torch.tensor([t.data_ptr() for t in tensors], dtype=torch.int64, device="cuda")
    out = tilelang.compile(main, out_idx=[-1])(table)
    torch.testing.assert_close(out, torch.stack(tensors) * 2)


# ---- global workspaces -----------------------------------------------------------------------------------


@tilelang.jit(out_idx=[-1])
def split_sum(M, N, splits):
    cols = N // splits

    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), out: T.Tensor((M,), "float32")):
        partial = T.alloc_global((splits, M), "float32")
        with T.Kernel(M // 128, splits, threads=128) as (bx, by):
            for i in T.Parallel(128):
                acc = T.alloc_var("float32", init=0.0)
                for j in T.serial(cols):
                    acc += A[bx * 128 + i, by * cols + j]
                partial[by, bx * 128 + i] = acc
        with T.Kernel(M // 128, threads=128) as bx:
            for i in T.Parallel(128):
                total = T.alloc_var("float32", init=0.0)
                for s in T.serial(splits):
                    total += partial[s, bx * 128 + i]
                out[bx * 128 + i] = total

    return main


def test_workspace_carries_partial_results_between_kernels():
    kernel = split_sum(256, 512, 4)
    for _ in range(3):  # each call gets a workspace; the caching allocator reuses the memory
        a = _rand(256, 512, dtype=torch.float32)
        torch.testing.assert_close(kernel(a), a.sum(1), rtol=1e-4, atol=1e-3)


def test_workspace_on_a_side_stream():
    kernel = split_sum(256, 512, 4)
    a = _rand(256, 512, dtype=torch.float32)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        out = kernel(a)
    stream.synchronize()
    torch.testing.assert_close(out, a.sum(1), rtol=1e-4, atol=1e-3)


def test_workspace_without_a_tensor_allocator():
    """Called with tvm-ffi tensors, no torch allocator may be set: the launcher's own path."""
    import tvm_ffi

    kernel = split_sum(256, 512, 4)
    a = _rand(256, 512, dtype=torch.float32)
    out = torch.empty(256, dtype=torch.float32, device="cuda")
    fn = kernel._ensure_built()
    fn(tvm_ffi.from_dlpack(a), tvm_ffi.from_dlpack(out))
    torch.cuda.synchronize()
    torch.testing.assert_close(out, a.sum(1), rtol=1e-4, atol=1e-3)
