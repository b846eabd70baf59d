"""TileLang's low-level language names: what each builds (IR) and what the generated CUDA holds,
compiled by nvcc where it matters; and the names for hardware tilelang does not support."""

import pytest
import tvm_ffi
from tvm import ir, tirx

import tilelang
import tilelang.language as T
from tilelang.codegen import cuda
from tilelang.errors import UserError
from tilelang.testing import assert_points_at


def _collect(node, kind):
    out = []
    tvm_ffi.structural_walk(node, [(kind, out.append)], order="pre")
    return out


def _source(func, arch="sm_80"):
    kernel = tilelang.compile(func, target=arch)
    src = kernel.get_kernel_source()
    return src, kernel


# ---- scalar helpers ------------------------------------------------------------------------------


def test_clamp_shifts_and_coordinates():
    x = tirx.Var("x", "int32")
    assert str(T.clamp(x, 0, 7)) == "T.min(T.max(x, 0), 7)"
    assert str(T.shift_left(x, 2)) == "x << 2" and str(T.shift_right(x, 1)) == "x >> 1"
    i, j, k = T.index_to_coordinates(x, (4, 8, 16))
    assert (str(i), str(j), str(k)) == ("x // 16 // 8 % 4", "x // 16 % 8", "x % 16")
    assert T.index_to_coordinates(37, (4, 10)) == [3, 7]


def test_reinterpret_takes_tilelangs_order_and_tvms():
    x = tirx.Var("x", "float32")
    assert str(T.reinterpret(x, T.uint32)) == str(T.reinterpret("uint32", x)) == 'T.reinterpret("uint32", x)'


def scalar_kernel():
    @T.prim_func
    def main(A: T.Tensor((128,), T.int32), B: T.Tensor((128,), T.float16)):
        with T.Kernel(1, threads=128):
            tx = T.get_thread_binding()
            T.assume(A[tx] >= 0)
            T.device_assert(A[tx] < 1000, 'index "out" of range')
            B[tx] = T.clamp(T.Cast(T.float16, T.shift_left(A[tx], 1)), T.float16(-4), T.float16(4))

    return main


def test_scalar_helpers_generated_code():
    src, kernel = _source(scalar_kernel())
    assert "__builtin_assume((0 <= A_ptr[((int)threadIdx.x)]))" in src
    # A failed check prints the (escaped) message and traps.
    assert "if (1000 <= A_ptr[((int)threadIdx.x)]) {" in src
    assert 'printf("%s\\n", "tilelang device_assert failed: index \\"out\\" of range");' in src
    assert "__trap();" in src
    assert "min(max(" in src and "<< 1" in src
    cuda.compile_object(src, kernel.target)


def test_assume_needs_a_condition():
    # raised at the call: the traceback shows the user's line
    with pytest.raises(UserError, match="T.assume takes a condition"):
        T.assume(tirx.Var("x", "int32"))


# ---- pointers and extern device code ------------------------------------------------------------

DECODE = """
template <typename T1, typename T2>
__device__ void widen8(const T1* a, T2* b) { for (int i = 0; i < 8; ++i) b[i] = (T2)a[i]; }
"""


def extern_kernel():
    @T.prim_func
    def main(A: T.Tensor((128, 8), T.int8), B: T.Tensor((128, 8), T.float16), C: T.Tensor((128,), T.int32)):
        with T.Kernel(1, threads=(32, 4)):
            a = T.alloc_local((8,), T.int8)
            b = T.alloc_local((8,), T.float16)
            acc = T.alloc_local((1,), T.int32)
            tx = T.thread_binding(0, 32, thread="threadIdx.x")
            ty = T.thread_binding(0, 4, thread="threadIdx.y")
            T.import_source(DECODE)
            for v in T.vectorized(8):
                a[v] = A[ty * 32 + tx, v]
            T.call_extern("void", "widen8", T.access_ptr(a, "r"), T.access_ptr(b, "w"))
            acc[0] = 0
            T.dp4a(a[0], a[4], acc[0])
            for v in T.serial(8):
                B[ty * 32 + tx, v] = b[v]
            C[ty * 32 + tx] = acc[0]

    return main


def test_extern_call_ir():
    func = extern_kernel()
    (attr,) = [a for a in _collect(func.body, tirx.AttrStmt) if a.attr_key == "pragma_import_c"]
    assert "widen8" in str(attr.value.value)
    calls = [c for c in _collect(func.body, ir.Call) if c.op.name == "tirx.tvm_access_ptr"]
    # (element type, buffer, offset, extent, read/write mask): the whole 8-element buffer.
    assert [(int(c.args[3]), int(c.args[4])) for c in calls] == [(8, 1), (8, 2)]


def test_extern_call_generated_code():
    src, _ = _source(extern_kernel())
    assert "widen8((&(a_ptr[0])), (&(b_ptr[0])));" in src
    # dp4a: four int8 lanes each, as one int32 operand of CUDA's __dp4a.
    assert "acc_ptr[0] = __dp4a(" in src and "*(int*)(a_ptr + 4)" in src
    # threadIdx.x/y are the kernel's own indices.
    assert "(A_ptr + ((((int)threadIdx.y) * 256) + (((int)threadIdx.x) * 8)))" in src
    # The imported source comes before the kernel.
    assert src.index("__device__ void widen8") < src.index("__global__")


def test_access_ptr_offsets_and_extents():
    buf = tirx.decl_buffer((4, 16), "float16", name="S")
    i = tirx.Var("i", "int32")

    def args(ptr):  # (offset, extent, read/write mask)
        return [str(a) for a in ptr.args[2:]]

    assert args(T.access_ptr(buf[i, 3], "rw", 8)) == ["i * 16 + 3", "8", "3"]
    assert args(T.access_ptr(buf[1, 0], "r")) == ["16", "1", "1"]  # an element: extent 1
    assert args(T.access_ptr(buf, "w")) == ["0", "64", "2"]  # a buffer: all of it
    assert args(T.access_ptr(buf[1, i], "r", extent=4, ignore_last_ndim=1)) == ["16", "4", "1"]
    flat = tirx.decl_buffer((64,), "float16", name="F")
    assert args(T.access_ptr(flat, "r", offset=8)) == ["8", "56", "1"]
    assert args(T.access_ptr(flat[i], "r", 2, 4)) == ["i", "8", "1"]


def test_access_ptr_errors():
    frag = tirx.decl_buffer((16, 16), "float32", name="acc", scope="local.fragment")
    # raised at the call: the traceback shows the user's line
    with pytest.raises(UserError, match="'acc' is a fragment"):
        T.access_ptr(frag, "r")
    # raised at the call: the traceback shows the user's line
    with pytest.raises(UserError, match="access_type must be 'r', 'w' or 'rw'"):
        T.access_ptr(tirx.decl_buffer((4,), "float32"), "x")
    # raised at the call: the traceback shows the user's line
    with pytest.raises(UserError, match="offset= is for 1-D buffers"):
        T.access_ptr(tirx.decl_buffer((4, 4), "float32"), "r", offset=2)


def test_dp4a_checks_dtypes():
    # raised at the call: the traceback shows the user's line
    with pytest.raises(UserError, match="T.dp4a: C must be int32"):
        T.dp4a(tirx.decl_buffer((4,), "int8"), tirx.decl_buffer((4,), "int8"), tirx.decl_buffer((1,), "float32"))


# ---- cp.async and barriers ---------------------------------------------------------------------


def async_kernel():
    @T.prim_func
    def main(A: T.Tensor((4, 32, 64), T.float16), B: T.Tensor((128, 64), T.float16)):
        with T.Kernel(1, threads=256):
            A_flat = T.Tensor((128, 64), T.float16, A.data)  # A seen as 128 x 64
            S = T.alloc_shared((128, 64), T.float16)
            ready = T.alloc_barrier(128)
            tx = T.get_thread_binding()
            with T.ws(0):
                for r in T.serial(16):
                    T.ptx_cp_async(
                        T.access_ptr(S[r * 8 + tx // 16, tx % 8 * 8], "w", 8),
                        T.access_ptr(A_flat[r * 8 + tx // 16, tx % 8 * 8], "r", 8),
                        8,
                    )
                T.cp_async_barrier_noinc(ready)
                T.ptx_commit_group()
                T.ptx_wait_group(0)
                T.fence_proxy_async()
            with T.ws(1):
                T.mbarrier_wait_parity(ready, 0)
                for j in T.serial(64):
                    B[tx - 128, j] = S[tx - 128, j]
                T.mbarrier_arrive(ready)
                T.mbarrier_arrive_expect_tx(ready, 0)
                T.sync_threads(1, 128)

    return main


def test_async_copy_and_barrier_names_generated_code():
    src, kernel = _source(async_kernel(), "sm_90a")
    producer = src[src.index("if (((int)threadIdx.x) < 128) {") :]
    consumer = src[src.index("if (128 <= ((int)threadIdx.x)) {") :]
    assert "tl::cp_async<16>((&(S_ptr[" in producer and "(&(A_ptr[" in producer
    assert "cp_async_mbarrier_arrive_async_mbarrier_arrive_noinc_shared__cta_b64(" in producer
    assert "tl::cp_async_commit();" in producer and "tl::cp_async_wait<0>();" in producer
    assert "fence_proxy_proxy_async_shared__cta();" in producer
    assert "tl::mbarrier_wait((&(ready_ptr[0])), (uint)0);" in consumer
    assert "tl::mbarrier_arrive((&(ready_ptr[0])));" in consumer
    assert "tl::mbarrier_arrive_expect_tx((&(ready_ptr[0])), (uint)0);" in consumer
    assert "tl::named_barrier_sync<1, 128>();" in consumer
    cuda.compile_object(src, kernel.target)


def test_sync_threads_plain_is_a_block_barrier():
    call = T.sync_threads()
    assert call.op.name == "tirx.tvm_storage_sync" and str(call.args[0].value) == "shared"
    # raised at the call: the traceback shows the user's line
    with pytest.raises(UserError, match="barrier_id must be a constant"):
        T.sync_threads(16, 128)
    with pytest.raises(UserError, match="multiple of 32"):  # raised at the call: the traceback shows the user's line
        T.sync_threads(1, 100)


def test_cp_async_size_errors():
    shared = tirx.decl_buffer((64,), "float16", scope="shared.dyn")
    glob = tirx.decl_buffer((64,), "float16")
    # raised at the call: the traceback shows the user's line
    with pytest.raises(UserError, match="4, 8 or 16 bytes; 3 float16 elements are 6 bytes"):
        T.ptx_cp_async(T.access_ptr(shared, "w"), T.access_ptr(glob, "r"), 3)
    # raised at the call: the traceback shows the user's line
    with pytest.raises(UserError, match="pointers from T.access_ptr"):
        T.ptx_cp_async(shared, glob, 8)


def test_mbarrier_arrive_on_another_block_is_unsupported():
    with pytest.raises(UserError, match="cluster barrier") as err:

        @T.prim_func
        def main(A: T.Tensor((64,), T.float32)):
            with T.Kernel(1, threads=128):
                bar = T.alloc_barrier(1)
                T.mbarrier_arrive(bar, 0)

    assert_points_at(err, "T.mbarrier_arrive(bar, 0)")


# ---- kernel scopes: thread_binding, ws, parallel ------------------------------------------------


def test_thread_binding_is_the_kernels_index():
    seen = []

    @T.prim_func
    def main(A: T.Tensor((128,), T.float32)):
        with T.Kernel(1, threads=128):
            tx = T.thread_binding(0, 128, thread="threadIdx.x")
            seen.append(tx.same_as(T.get_thread_binding()))
            A[tx] = 1.0

    assert seen == [True]


@pytest.mark.parametrize(
    "body, message",
    [
        ("tx = T.thread_binding(0, 64, thread='threadIdx.x')", r"runs 128 threads along threadIdx.x"),
        ("tx = T.thread_binding(0, 1, thread='threadIdx.y')", r"no threadIdx.y"),
        ("tx = T.thread_binding(0, 128, thread='blockIdx.x')", r"thread must be one of"),
        ("for tx in T.thread_binding(0, 128, thread='threadIdx.x'):\n                A[tx] = 1.0", r"as a for loop"),
    ],
)
def test_thread_binding_errors(tmp_path, body, message):
    source = f"""
import tilelang.language as T

@T.prim_func
def main(A: T.Tensor((128,), T.float32)):
    with T.Kernel(1, threads=128):
        if True:
            {body}
"""
    path = tmp_path / "kernel.py"
    path.write_text(source)
    with pytest.raises(UserError, match=message) as err:
        exec(compile(source, str(path), "exec"), {})
    # The line of `{body}` in kernel.py; the parser shows no source text for a kernel compiled from a string
    # (the location is all there is to check; reported).
    assert f" --> {path}:8:" in str(err.value), str(err.value)


def test_ws_selects_warpgroups():
    @T.prim_func
    def main(A: T.Tensor((384,), T.float32)):
        with T.Kernel(1, threads=384):
            tx = T.get_thread_binding()
            with T.ws(0):
                A[tx] = 0.0
            with T.ws(2):
                A[tx] = 2.0
            with T.ws(0, 2):
                A[tx] = A[tx] + 1.0

    conds = [str(s.condition) for s in _collect(main.body, tirx.IfThenElse)]
    assert conds == ["tx < 128", "tx >= 256 and tx < 384", "tx < 128 or tx >= 256 and tx < 384"]
    with pytest.raises(UserError, match="warpgroups 0..0, got 1") as err:

        @T.prim_func
        def bad(A: T.Tensor((128,), T.float32)):
            with T.Kernel(1, threads=128):
                with T.ws(1):
                    A[0] = 1.0

    assert_points_at(err, "with T.ws(1):")


def test_lowercase_parallel_is_a_parallel_loop():
    @T.prim_func
    def main(A: T.Tensor((64, 32), T.float32)):
        with T.Kernel(1, threads=128):
            for i in T.parallel(64):
                for j in T.parallel(32):
                    A[i, j] = 1.0

    loops = _collect(main.body, tirx.For)
    assert [loop.kind for loop in loops] == [tirx.ForKind.PARALLEL] * 2
    src, _ = _source(main)
    # Spread over the threads and vectorized, as T.Parallel(64, 32) is.
    assert "*(float4*)(A_ptr + ((r * 512) + (((int)threadIdx.x) * 4))) = make_float4(" in src


# ---- memory: Tensor views, pointer tables, alloc_buffer, Layout ---------------------------------


def test_tensor_view_and_pointer_table():
    @T.prim_func
    def main(P: T.Tensor((4,), T.ptr), X: T.Tensor((4, 2, 64), T.float32), B: T.Tensor((4, 128), T.float32)):
        with T.Kernel(4, threads=128) as bx:
            A = T.make_tensor(P[bx], (128,), T.float32)
            X_flat = T.Tensor((4, 128), T.float32, X.data)
            S = T.alloc_shared((128,), T.float32)
            T.copy(A, S)
            for i in T.Parallel(128):
                B[bx, i] = S[i] + X_flat[bx, i]

    assert str(main.params[0].dtype) == "int64"
    src, _ = _source(main)
    assert "float* v = (float*)((float*)P_ptr[((int)blockIdx.x)]);" in src
    assert "X_ptr[((((int)blockIdx.x) * 128) + ((int)threadIdx.x))]" in src  # the view reads X's memory


def test_alloc_buffer_scopes():
    @T.prim_func
    def main(A: T.Tensor((64,), T.float32)):
        with T.Kernel(1, threads=64):
            s = T.alloc_buffer((64,), T.float32, scope="shared.dyn")
            f = T.alloc_fragment((64,), T.float32, scope="local")
            loc = T.alloc_local((4,), T.float32)
            s[0] = f[0] + loc[0]

    scopes = {a.buffer.name: a.buffer.scope() for a in _collect(main.body, tirx.AllocBuffer)}
    assert scopes == {"s": "shared.dyn", "f": "local", "loc": "local"}
    # raised at the call: the traceback shows the user's line
    with pytest.raises(UserError, match="scope must be one of"):
        T.alloc_buffer((4,), T.float32, scope="texture")


def test_layout_from_a_function():
    swz = T.Layout((64, 64), lambda i, j: [i, (j // 8) ^ (i % 8), j % 8])
    assert swz.output_shape == (64, 8, 8) and swz.physical_size == 4096
    assert _at(swz, 1, 8) == 64 and _at(swz, 1, 0) == 64 + 8  # row 1: chunks 0 and 1 swapped
    perm = T.Layout((2, 3, 4), lambda b, l, d: [l, b, d])
    assert perm.output_shape == (3, 2, 4) and _at(perm, 1, 2, 3) == 2 * 8 + 1 * 4 + 3
    # raised at the call: the traceback shows the user's line
    with pytest.raises(UserError, match="map to the same position"):
        T.Layout((4, 4), lambda i, j: [i // 2, j])


def _at(layout, *idx):
    from tilelang.layout.evaluate import evaluate

    return int(evaluate(layout.forward, {v: i for v, i in zip(layout.vars, idx)}))


def test_layout_annotates_a_shared_tile():
    @T.prim_func
    def main(A: T.Tensor((64, 64), T.float16), B: T.Tensor((64, 64), T.float16)):
        with T.Kernel(1, threads=128):
            S = T.alloc_shared((64, 64), T.float16)
            T.annotate_layout({S: T.Layout((64, 64), lambda i, j: [i, (j // 8) ^ (i % 8), j % 8])})
            T.copy(A, S)
            T.copy(S, B)

    src, _ = _source(main)
    assert "^" in src  # stored through the swizzle


# ---- TVM's names, and names for other hardware --------------------------------------------------


def test_tvm_names_are_tvms():
    from tvm.script import tirx as S

    assert T.comm_reducer is S.comm_reducer
    assert T.tvm_warp_shuffle is S.tvm_warp_shuffle

    @T.prim_func
    def main(A: T.Tensor((64,), T.float32)):
        with T.Kernel(1, threads=64):
            with T.attr(0, "pragma_unroll_explicit", 1):
                A[0] = 1.0

    assert [a.attr_key for a in _collect(main.body, tirx.AttrStmt)][-1] == "pragma_unroll_explicit"


@pytest.mark.parametrize("name", ["alloc_tmem", "tcgen05_gemm", "tcgen05_mma_arrive", "ClusterKernel"])
def test_unsupported_hardware_names_raise_naming_the_target(name):
    # raised at the call: the traceback shows the user's line
    with pytest.raises(UserError, match=rf"T.{name}: .* needs .*tilelang compiles for sm_80, sm_89 and sm_90a"):
        getattr(T, name)((128, 128), T.float32)
    # raised at the call: the traceback shows the user's line
    assert "sm_100" in str(pytest.raises(UserError, T.alloc_tmem).value)
