"""Vector conversions and broadcasts TVM's CUDA code generator prints wrong (codegen/vectors.py,
convert.h, common.h's broadcast constructors), on the CPU.

Three tiers here: convert.h's conversions run on the host (nvcc compiles them for the CPU too) and
are checked against torch's; kernels with such vectors lower to the helper calls and compile with
nvcc for sm_89 and sm_90a; the vector planner keeps to the widths the code generator can print.
The GPU runs of these kernels are in test_vector_conversions_gpu.py.
"""

import functools
import os
import subprocess

import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang import env
from tilelang.codegen import cuda, vectors
from tilelang.errors import UserError
from tilelang.op.vectorize import register_lanes
from tilelang.testing import assert_points_at

FLOATS = ["float32", "float16", "bfloat16"]
FP8 = ["float8_e4m3fn", "float8_e5m2"]
# Every pair with an fp8 side: (from, to).
PAIRS = [(a, b) for a in FLOATS + FP8 for b in FLOATS + FP8 if a != b and (a in FP8 or b in FP8)]


# ---- convert.h on the host ---------------------------------------------------------------------

_HOST_MAIN = r"""
#include "tl_templates/cuda/convert.h"
#include <cstdio>
#include <vector>

template <typename T, int N>
struct Lanes {
  T v[N];
};

// stdin: count lanes of From; stdout: the count lanes converted N at a time (count % N == 0).
template <typename To, typename From, int N>
int run() {
  std::vector<From> in;
  From x;
  while (fread(&x, sizeof(From), 1, stdin) == 1) in.push_back(x);
  for (size_t i = 0; i + N <= in.size(); i += N) {
    Lanes<From, N> src;
    for (int k = 0; k < N; ++k) src.v[k] = in[i + k];
    Lanes<To, N> dst = tl::vec_cast<To, From, N>(src);
    fwrite(dst.v, sizeof(To), N, stdout);
  }
  return 0;
}

int main(int argc, char** argv) {
  int which = atoi(argv[1]);
  switch (which) {
%CASES%
  }
  return 1;
}
"""

LANES = (2, 3, 8)  # a pair path, an odd count (a lane converted alone), TVM's widest fp8 cast


def _cases():
    return [(src, dst, n) for src, dst in PAIRS for n in LANES]


@functools.cache
def _host_program(tmp_root: str) -> str:
    cases = "\n".join(
        f"    case {i}: return run<{vectors.LANE_TYPES[dst]}, {vectors.LANE_TYPES[src]}, {n}>();"
        for i, (src, dst, n) in enumerate(_cases())
    )
    src_path, exe = os.path.join(tmp_root, "convert_main.cu"), os.path.join(tmp_root, "convert_main")
    with open(src_path, "w") as f:
        f.write(_HOST_MAIN.replace("%CASES%", cases))
    cmd = [env.nvcc_path(), "-std=c++17", "-O1", "-w", f"-I{env.template_path()}", "-o", exe, src_path]
    subprocess.run(cmd, check=True, capture_output=True)
    return exe


def _inputs(src: str) -> torch.Tensor:
    """Values of `src` that every destination can hold or saturates: fp8 values (all finite e4m3 and
    e5m2 values, so rounding ties between them occur), values between them, subnormals, zeros, and
    values past the fp8 ranges."""
    codes = torch.arange(256, dtype=torch.uint8)
    e4m3 = codes.view(torch.float8_e4m3fn).float()
    e5m2 = codes.view(torch.float8_e5m2).float()
    values = torch.cat([e4m3, e5m2, (e4m3[:-1] + e4m3[1:]) / 2, torch.randn(240) * 100, torch.tensor([1e6, -1e6])])
    values = values[torch.isfinite(values)]
    if src in FP8:
        values = values.clamp(-448, 448) if src == "float8_e4m3fn" else values
    values = values.to(getattr(torch, src))
    pad = (-values.numel()) % (2 * 3 * 8)
    return torch.cat([values, values[:pad]])


def _expected(x: torch.Tensor, dst: str) -> torch.Tensor:
    """torch's conversion, saturating as cuda_fp8.h's __NV_SATFINITE does (torch gives NaN or inf)."""
    if dst in FP8:
        top = torch.finfo(getattr(torch, dst)).max
        return x.float().clamp(-top, top).to(getattr(torch, dst))
    return x.float().to(getattr(torch, dst))  # exact from fp8: every fp8 value is a float


@pytest.mark.parametrize("case", range(len(PAIRS) * len(LANES)))
def test_vec_cast_converts_each_lane_as_torch(case, tmp_path_factory):
    src, dst, n = _cases()[case]
    exe = _host_program(str(tmp_path_factory.getbasetemp()))
    x = _inputs(src)
    raw = x.view(torch.uint8).numpy().tobytes()
    out = subprocess.run([exe, str(case)], input=raw, capture_output=True, check=True).stdout
    got = torch.frombuffer(bytearray(out), dtype=getattr(torch, dst))
    want = _expected(x, dst)
    assert got.numel() == want.numel()
    torch.testing.assert_close(got.float(), want.float(), rtol=0, atol=0, equal_nan=True, msg=f"{src} -> {dst} x{n}")


def test_vec_broadcast_repeats_the_lane(tmp_path):
    src = tmp_path / "broadcast.cu"
    src.write_text(
        '#include "tl_templates/cuda/convert.h"\n#include <cstdio>\n'
        "int main() {\n"
        "  uint4 v = tl::vec_broadcast<__nv_fp8_e5m2, 16>(__nv_fp8_e5m2(-1.5f));\n"
        "  fwrite(&v, 16, 1, stdout);\n}\n"
    )
    out = _run_host(src, tmp_path)
    assert torch.frombuffer(bytearray(out), dtype=torch.float8_e5m2).float().tolist() == [-1.5] * 16


# ---- common.h: the integer broadcasts TVM spells with one argument per lane ---------------------

_MAKE_CASES = {
    # TVM's spelling of a broadcast of a 16 x int8 ... 8 x uint32 vector -> (torch dtype, lanes)
    "make_int2((signed char)-1, (signed char)2, (signed char)3, (signed char)4, (signed char)5, (signed char)6, "
    "(signed char)7, (signed char)-128)": (torch.int8, [-1, 2, 3, 4, 5, 6, 7, -128]),
    "make_uint2((unsigned char)255, (unsigned char)1, (unsigned char)2, (unsigned char)3, (unsigned char)4, "
    "(unsigned char)5, (unsigned char)6, (unsigned char)200)": (torch.uint8, [255, 1, 2, 3, 4, 5, 6, 200]),
    "make_int4(" + ", ".join(f"(signed char){v}" for v in range(-8, 8)) + ")": (torch.int8, list(range(-8, 8))),
    "make_uint4(" + ", ".join(f"(unsigned char){v}" for v in range(240, 256)) + ")": (
        torch.uint8,
        list(range(240, 256)),
    ),
    "make_int4((short)-1, (short)300, (short)3, (short)4, (short)5, (short)6, (short)7, (short)-300)": (
        torch.int16,
        [-1, 300, 3, 4, 5, 6, 7, -300],
    ),
    "make_uint4((unsigned short)65535, (unsigned short)1, (unsigned short)2, (unsigned short)3, (unsigned short)4, "
    "(unsigned short)5, (unsigned short)6, (unsigned short)7)": (torch.uint16, [65535, 1, 2, 3, 4, 5, 6, 7]),
    "make_longlong4(-1, 2, 3, 4, 5, 6, 7, -2147483647)": (torch.int32, [-1, 2, 3, 4, 5, 6, 7, -2147483647]),
    # Eight unsigned ints: their bits, not the bits of the floats they are close to.
    "make_ulonglong4((unsigned int)4294967295, (unsigned int)1, (unsigned int)2, (unsigned int)3, (unsigned int)4, "
    "(unsigned int)5, (unsigned int)6, (unsigned int)16777217)": (
        torch.uint32,
        [4294967295, 1, 2, 3, 4, 5, 6, 16777217],
    ),
    "make_ulonglong4(1.5f, 2.f, 3.f, 4.f, 5.f, 6.f, 7.f, -8.f)": (torch.float32, [1.5, 2, 3, 4, 5, 6, 7, -8]),
}


def _run_host(src, tmp_path) -> bytes:
    exe = tmp_path / "main"
    cmd = [env.nvcc_path(), "-std=c++17", "-w", f"-I{env.template_path()}", "-o", str(exe), str(src)]
    subprocess.run(cmd, check=True, capture_output=True)
    return subprocess.run([str(exe)], check=True, capture_output=True).stdout


def test_integer_broadcast_constructors_store_each_lane(tmp_path):
    calls = list(_MAKE_CASES)
    body = "".join(f"  {{ auto v = {c}; fwrite(&v, sizeof(v), 1, stdout); }}\n" for c in calls)
    src = tmp_path / "make.cu"
    src.write_text(f'#include "tl_templates/cuda/common.h"\n#include <cstdio>\nint main() {{\n{body}}}\n')
    out, offset = _run_host(src, tmp_path), 0
    for call in calls:
        dtype, lanes = _MAKE_CASES[call]
        size = len(lanes) * torch.tensor([], dtype=dtype).element_size()
        got = torch.frombuffer(bytearray(out[offset : offset + size]), dtype=dtype)
        offset += size
        assert got.tolist() == lanes, call


# ---- kernels with such vectors (the GPU tests run these) -----------------------------------------


def vector_cast(src: str, dst: str, lanes: int):
    """Each of 128 threads casts its `lanes` values as one vector (`T.vectorized`)."""

    @T.prim_func
    def main(X: T.Tensor((128, lanes), src), Y: T.Tensor((128, lanes), dst)):
        with T.Kernel(1, threads=128):
            tx = T.get_thread_binding()
            a = T.alloc_local((lanes,), src)
            b = T.alloc_local((lanes,), dst)
            for v in T.serial(lanes):
                a[v] = X[tx, v]
            for v in T.vectorized(lanes):
                b[v] = T.cast(a[v], dst)
            for v in T.serial(lanes):
                Y[tx, v] = b[v]

    return main


def fragment_cast(src: str, dst: str, rows: int = 8, cols: int = 128, threads: int = 128):
    """A tile through fragments, cast by T.copy between fragments."""

    @T.prim_func
    def main(X: T.Tensor((rows, cols), src), Y: T.Tensor((rows, cols), dst)):
        with T.Kernel(1, threads=threads):
            a = T.alloc_fragment((rows, cols), src)
            b = T.alloc_fragment((rows, cols), dst)
            T.copy(X, a)
            T.copy(a, b)
            T.copy(b, Y)

    return main


def per_token_cast(dst: str = "float8_e4m3fn", rows: int = 8, cols: int = 128):
    """The public per-token fp8 cast example's pattern: each row scaled by its absolute maximum into
    fp8's range in float32, then T.copy to an fp8 fragment (8 values per thread after the
    reduction's layout). Returns Y and the per-row scales."""
    top = 448.0 if dst == "float8_e4m3fn" else 57344.0

    @T.prim_func
    def main(X: T.Tensor((rows, cols), "float32"), Y: T.Tensor((rows, cols), dst), S: T.Tensor((rows,), "float32")):
        with T.Kernel(1, threads=128):
            a = T.alloc_fragment((rows, cols), "float32")
            amax = T.alloc_fragment((rows,), "float32")
            w = T.alloc_fragment((rows, cols), "float32")
            b = T.alloc_fragment((rows, cols), dst)
            T.copy(X, a)
            T.reduce_absmax(a, amax, dim=1)
            for i in T.Parallel(rows):
                amax[i] = T.max(amax[i], 1e-4) / top
            for i, j in T.Parallel(rows, cols):
                w[i, j] = T.clamp(a[i, j] / amax[i], -top, top)
            T.copy(w, b)
            T.copy(b, Y)
            for i in T.Parallel(rows):
                S[i] = amax[i]

    return main


def fill(dtype: str, n: int, value, threads: int = 128):
    """T.fill of a fragment of `n` values (n / threads per thread), stored out."""

    @T.prim_func
    def main(Y: T.Tensor((n,), dtype)):
        with T.Kernel(1, threads=threads):
            b = T.alloc_fragment((n,), dtype)
            T.fill(b, value)
            T.copy(b, Y)

    return main


def _source(func, arch: str) -> str:
    kernel = tilelang.compile(func, target=arch)
    src = kernel.get_kernel_source()
    cuda.compile_object(src, kernel.target)
    return src[src.rindex('extern "C"') :]


@pytest.mark.parametrize("src,dst", PAIRS)
def test_eight_lane_fp8_casts_convert_each_lane(src, dst):
    body = _source(vector_cast(src, dst, 8), "sm_90a")
    assert f"tl::vec_cast<{vectors.LANE_TYPES[dst]}, {vectors.LANE_TYPES[src]}, 8>(" in body


@pytest.mark.parametrize("arch", ["sm_89", "sm_90a"])
@pytest.mark.parametrize("lanes", [2, 4, 16])
def test_casts_between_fp8_formats_convert(lanes, arch):
    body = _source(vector_cast("float8_e4m3fn", "float8_e5m2", lanes), arch)
    assert f"tl::vec_cast<__nv_fp8_e5m2, __nv_fp8_e4m3, {lanes}>(" in body


@pytest.mark.parametrize(
    "src,dst,spelled",
    [
        ("float32", "float8_e4m3fn", "(__nv_fp8x4_e4m3)(*(float4*)"),
        ("bfloat16", "float8_e5m2", "(__nv_fp8x4_e5m2)(*(nv_bfloat164*)"),
        ("float8_e4m3fn", "float16", "(half4)(*(__nv_fp8x4_e4m3*)"),
    ],
)
def test_casts_tvm_converts_are_left_as_they_are(src, dst, spelled):
    body = _source(vector_cast(src, dst, 4), "sm_89")
    assert spelled in body and "tl::vec_cast" not in body


def test_e5m2_to_bfloat16_x4_converts():  # TVM's bfloat16 x4 type converts from e4m3 only
    body = _source(vector_cast("float8_e5m2", "bfloat16", 4), "sm_90a")
    assert "tl::vec_cast<nv_bfloat16, __nv_fp8_e5m2, 4>(" in body


@pytest.mark.parametrize("arch", ["sm_89", "sm_90a"])
def test_fragment_copy_to_fp8_of_eight_values_per_thread(arch):
    # The public per-token cast example: a float32 fragment copied to an fp8 one, 8 per thread.
    body = _source(per_token_cast(), arch)
    assert "tl::vec_cast<__nv_fp8_e4m3, float, 8>(" in body and "(uint2)(" not in body


@pytest.mark.parametrize("src,dst", [("float8_e4m3fn", "float16"), ("float8_e5m2", "bfloat16")])
def test_fp8_fragment_widened_to_16_bits_in_printable_vectors(src, dst):
    # 32 fp8 values per thread; the 16-bit vectors stop at 8 lanes (TVM has no float16x16 type).
    body = _source(fragment_cast(src, dst, rows=32, cols=128), "sm_90a")
    assert f"tl::vec_cast<{vectors.LANE_TYPES[dst]}, {vectors.LANE_TYPES[src]}, 8>(" in body


@pytest.mark.parametrize("bits,lanes", [(8, 16), (16, 8), (32, 8), (64, 4), (4, 32)])
def test_register_lanes_are_what_the_code_generator_prints(bits, lanes):
    assert register_lanes(bits) == lanes


@pytest.mark.parametrize(
    "dtype,value,spelled",
    [
        ("float8_e4m3fn", 1.5, "tl::vec_broadcast<__nv_fp8_e4m3, 16>("),
        ("int8", -3, "make_int4((signed char)-3"),
        ("uint8", 200, "make_uint4((uchar)200"),
        ("int32", -1, "make_longlong4(-1, -1, -1, -1, -1, -1, -1, -1)"),
        ("uint32", 4294967295, "make_ulonglong4((uint)4294967295"),
    ],
)
def test_fills_of_wide_vectors_compile(dtype, value, spelled):
    lanes = 16 if "8" in dtype and "32" not in dtype else 8
    body = _source(fill(dtype, 128 * lanes, value), "sm_90a")
    assert spelled in body


def scalar_cast(src: str, dst: str, n: int = 4):
    @T.prim_func
    def main(X: T.Tensor((128, n), src), Y: T.Tensor((128, n), dst)):
        with T.Kernel(1, threads=128):
            tx = T.get_thread_binding()
            for v in T.serial(n):
                Y[tx, v] = T.cast(X[tx, v], dst)

    return main


@pytest.mark.parametrize("src,dst", [("float8_e4m3fn", "float8_e5m2"), ("float8_e5m2", "float8_e4m3fn")])
def test_scalar_cast_between_fp8_formats_goes_through_float(src, dst):
    body = _source(scalar_cast(src, dst), "sm_89")
    assert f"(({vectors.LANE_TYPES[dst]})((float)X_ptr[" in body


# ---- 4-bit values: fp4 as bytes, others refused by name (TVM stores them a byte each but reads two
# to a byte) ---------------------------------------------------------------------------------------


def four_bit_registers(dtype: str):
    @T.prim_func
    def main(X: T.Tensor((128, 8), "int8"), Y: T.Tensor((128, 8), "int8")):
        with T.Kernel(1, threads=128):
            tx = T.get_thread_binding()
            nibbles = T.alloc_local((8,), dtype)
            for v in T.serial(8):
                nibbles[v] = T.cast(X[tx, v], dtype)
            for v in T.serial(8):
                Y[tx, v] = T.cast(nibbles[v], "int8")

    return main


def four_bit_tensor(dtype: str):
    @T.prim_func
    def main(X: T.Tensor((64, 64), "float32"), Y: T.Tensor((64, 64), dtype)):
        with T.Kernel(1, threads=128):
            for i, j in T.Parallel(64, 64):
                Y[i, j] = T.cast(X[i, j], dtype)

    return main


@pytest.mark.parametrize("kernel,name", [(four_bit_registers, "nibbles"), (four_bit_tensor, "Y")])
def test_four_bit_integer_buffers_are_refused_by_name(kernel, name):
    message = rf"'{name}' holds int4 values; tilelang compiles[\s\S]*float4_e2m1fn[\s\S]*uint8"
    with pytest.raises(UserError, match=message) as err:
        tilelang.compile(kernel("int4"), target="sm_90a").get_kernel_source()
    assert_points_at(err, f"{name}[{'v' if name == 'nibbles' else 'i, j'}] = T.cast(X[")  # its first use


@pytest.mark.parametrize("kernel", [four_bit_registers, four_bit_tensor])
def test_fp4_buffers_compile_as_bytes(kernel):
    # (transform/pack_fp4_tensors.py: a code per byte in registers, two values a byte in tensors)
    _source(kernel("float4_e2m1fn"), "sm_90a")
