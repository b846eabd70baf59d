"""Generated code for dynamic shapes: the symbol is a kernel argument, the host launcher reads it from
the tensors and checks those that share it, the tail is predicated; nvcc compiles it for sm_80 and
sm_90a and the library links (no GPU needed)."""

import re

import dynamic_kernels
import pytest
import tvm_ffi

import tilelang
import tilelang.language as T
from tilelang.codegen import cuda

vector_add = tilelang.jit(out_idx=[-1], target="sm_80")(dynamic_kernels.vector_add)


def matmul_dynamic_m(N, K, block_M=128, block_N=128, block_K=32, symbol_dtype="int32"):
    return dynamic_kernels.matmul(T.dynamic("m", symbol_dtype), N, K, block_M, block_N, block_K, num_stages=3)


def _body(src: str) -> str:
    return src[src.rindex('extern "C" __global__') :]


def test_symbol_is_a_kernel_argument_and_the_tail_is_guarded():
    kernel = vector_add()
    body = _body(kernel.get_kernel_source())
    assert re.search(r"vector_add_kernel\(float\* __restrict__ A_ptr, .*, int n\)", body)
    assert "< n)" in body
    assert "1000" not in body and "4096" not in body  # no size baked in: one kernel for every n


def test_host_reads_the_symbol_checks_sharing_tensors_and_sizes_the_grid():
    host = vector_add().get_host_source()
    assert "int32_t n = ((int32_t)(((int64_t*)vector_add_A_shape)[0]));" in host
    # B and C must have A's size: the launcher rejects the call before launching.
    for name in ("B", "C"):
        assert f'"Mismatched ", "{name}.shape[0]"' in host
    assert '"`,\\n  expected to match ", "A.shape[0]"' in host
    assert "((n + 1023) >> 10)" in host  # the grid, from n at every call


def test_int64_symbol_stays_int64_from_launcher_to_kernel():
    kernel = vector_add(symbol_dtype="int64")
    assert "int64_t n = (((int64_t*)vector_add_A_shape)[0]);" in kernel.get_host_source()
    body = _body(kernel.get_kernel_source())
    assert "int64_t n)" in body and "< n)" in body


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_dynamic_elementwise_compiles_with_nvcc(arch):
    kernel = tilelang.compile(vector_add.factory(), out_idx=[-1], target=arch)
    cuda.compile_object(kernel.get_kernel_source(), kernel.target, host_src=kernel.get_host_source())


def test_dynamic_m_gemm_predicates_its_row_tail():
    kernel = tilelang.compile(matmul_dynamic_m(1024, 512), out_idx=[-1], target="sm_80")
    body = _body(kernel.get_kernel_source())
    assert re.search(r"C_ptr, int m\)", body)
    assert "tl::gemm_ss<128, 128, 32" in body
    # A's tiles are read with cp.async that zero-fills rows past m; B (static) needs no guard.
    a_copies = [line for line in body.splitlines() if "tl::cp_async<16>" in line and "A_ptr" in line]
    assert a_copies and all(line.rstrip().endswith("< m));") for line in a_copies)
    b_copies = [line for line in body.splitlines() if "tl::cp_async<16>" in line and "B_ptr" in line]
    assert b_copies and all("(bool)1" in line for line in b_copies)
    # The epilogue (after the last wait) stores only rows below m.
    epilogue = body[body.index("tl::cp_async_wait<0>();") :]
    assert "C_ptr" in epilogue and epilogue.count("< m)") == 1 and epilogue.index("< m)") < epilogue.index("C_ptr")
    assert "((m + 127) >> 7)" in kernel.get_host_source()  # grid rows from m


@pytest.mark.parametrize("arch,symbol_dtype", [("sm_80", "int32"), ("sm_90a", "int32"), ("sm_80", "int64")])
def test_dynamic_m_gemm_compiles_with_nvcc(arch, symbol_dtype):
    func = matmul_dynamic_m(1024, 512, symbol_dtype=symbol_dtype)
    kernel = tilelang.compile(func, out_idx=[-1], target=arch)
    cuda.compile_object(kernel.get_kernel_source(), kernel.target, host_src=kernel.get_host_source())


def test_dynamic_library_builds_links_and_loads(tmp_path):
    import torch

    kernel = tilelang.compile(vector_add.factory(), out_idx=[-1], target="sm_80")
    lib = cuda.build_library(kernel.get_kernel_source(), kernel.get_host_source(), kernel.target, out_dir=str(tmp_path))
    fn = tvm_ffi.load_module(lib)["main"]
    # Without a GPU the launcher stops at the device check; it got that far, so the symbol's
    # binding code and the kernel reference resolved at link and load time.
    with pytest.raises(ValueError, match="device_type"):
        fn(torch.empty(7), torch.empty(7), torch.empty(7))


def matmul_all_dynamic(block_M=64, block_N=64, block_K=32):
    return dynamic_kernels.matmul(*T.dynamic("m, n, k"), block_M, block_N, block_K, num_stages=2)


def test_gemm_with_every_dimension_dynamic_guards_and_compiles():
    kernel = tilelang.compile(matmul_all_dynamic(), out_idx=[-1], target="sm_80")
    body = _body(kernel.get_kernel_source())
    assert re.search(r"C_ptr, int \w, int \w, int \w\)", body)  # the three symbols are arguments
    # The pipeline's trip count and its prologue depend on k; K's tail reads zeros.
    assert "((k + 31) >> 5)" in body and "if (0 < k)" in body
    for bound in ("< m", "< n", "< k"):
        assert bound in body
    cuda.compile_object(kernel.get_kernel_source(), kernel.target, host_src=kernel.get_host_source())
