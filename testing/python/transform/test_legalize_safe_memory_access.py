import re

import pytest
from ir_testing import assert_ir_equal
from tvm import tirx

import tilelang
import tilelang.language as T
from tilelang.codegen import cuda
from tilelang.transform.legalize_safe_memory_access import legalize_safe_memory_access
from tilelang.utils.ir import collect


def test_partial_tile_is_guarded():
    @T.prim_func
    def before(A: T.Tensor((1000, 64), "float16"), C: T.Tensor((1000, 64), "float16")):
        with T.Kernel(8, threads=128) as bx:
            s = T.alloc_shared((128, 64), "float16")
            for i, j in T.Parallel(128, 64):
                s[i, j] = A[bx * 128 + i, j]
            for i, j in T.Parallel(128, 64):
                C[bx * 128 + i, j] = s[i, j] + A[bx * 128 + i, j]

    @T.prim_func
    def expected(A: T.Tensor((1000, 64), "float16"), C: T.Tensor((1000, 64), "float16")):
        with T.Kernel(8, threads=128) as bx:
            s = T.alloc_shared((128, 64), "float16")
            for i, j in T.Parallel(128, 64):
                s[i, j] = T.if_then_else(bx * 128 + i < 1000, A[bx * 128 + i, j], T.float16(0))
            for i, j in T.Parallel(128, 64):
                if bx * 128 + i < 1000:  # the store's guard already covers the load of A
                    C[bx * 128 + i, j] = s[i, j] + A[bx * 128 + i, j]

    assert_ir_equal(legalize_safe_memory_access(before), expected)


def test_in_bounds_tiles_are_untouched():
    @T.prim_func
    def before(A: T.Tensor((1024, 64), "float16"), C: T.Tensor((1024, 64), "float16")):
        with T.Kernel(8, threads=128) as bx:
            for i, j in T.Parallel(128, 64):
                C[bx * 128 + i, j] = A[bx * 128 + i, j]

    assert_ir_equal(legalize_safe_memory_access(before), before)


def test_shared_and_fragment_accesses_are_not_guarded():
    @T.prim_func
    def before(A: T.Tensor((1000,), "float32")):
        with T.Kernel(8, threads=128):
            s = T.alloc_shared((256,), "float32")
            for i in T.Parallel(128):
                s[i + 128] = s[i]

    assert_ir_equal(legalize_safe_memory_access(before), before)


def test_dynamic_extent_guards_the_tail():
    M = T.dynamic("m")

    @T.prim_func
    def before(A: T.Tensor((M, 64), "float16"), C: T.Tensor((M, 64), "float16")):
        with T.Kernel(T.ceildiv(M, 128), threads=128) as bx:
            s = T.alloc_shared((128, 64), "float16")
            for i, j in T.Parallel(128, 64):
                s[i, j] = A[bx * 128 + i, j]
            for i, j in T.Parallel(128, 64):
                C[bx * 128 + i, j] = s[i, j]

    @T.prim_func
    def expected(A: T.Tensor((M, 64), "float16"), C: T.Tensor((M, 64), "float16")):
        with T.Kernel(T.ceildiv(M, 128), threads=128) as bx:
            s = T.alloc_shared((128, 64), "float16")
            for i, j in T.Parallel(128, 64):
                s[i, j] = T.if_then_else(bx * 128 + i < M, A[bx * 128 + i, j], T.float16(0))
            for i, j in T.Parallel(128, 64):
                if bx * 128 + i < M:
                    C[bx * 128 + i, j] = s[i, j]

    assert_ir_equal(legalize_safe_memory_access(before), expected)


def test_int64_dynamic_extent_is_guarded_in_int64():
    N = T.dynamic("n", "int64")

    @T.prim_func
    def before(A: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, 128), threads=128) as bx:
            for i in T.Parallel(128):
                A[bx * 128 + i] = 1.0

    out = legalize_safe_memory_access(before)
    (guard,) = collect(out.body, tirx.IfThenElse)
    assert str(guard.condition.b) == "n" and str(guard.condition.a.ty.dtype) == "int64"


def test_loops_over_a_dynamic_extent_are_in_bounds_already():
    M = T.dynamic("m")

    @T.prim_func
    def before(A: T.Tensor((M, 64), "float32"), C: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=64):
            for r in T.serial(M):
                for j in T.Parallel(64):
                    C[j] = C[j] + A[r, j]
            for i in T.Parallel(M):
                A[M - 1 - i, 0] = 0.0

    assert_ir_equal(legalize_safe_memory_access(before), before)


def test_loads_in_bindings_conditions_and_indices_are_guarded():
    M = T.dynamic("m")

    @T.prim_func
    def before(A: T.Tensor((M,), "float32"), I: T.Tensor((M,), "int32"), C: T.Tensor((M,), "float32")):
        with T.Kernel(T.ceildiv(M, 128), threads=128) as bx:
            for i in T.Parallel(128):
                v = A[bx * 128 + i]
                if A[bx * 128 + i] > 0:
                    C[bx * 128 + i] = v
                C[bx * 128 + i] = A[I[bx * 128 + i]]

    @T.prim_func
    def expected(A: T.Tensor((M,), "float32"), I: T.Tensor((M,), "int32"), C: T.Tensor((M,), "float32")):
        with T.Kernel(T.ceildiv(M, 128), threads=128) as bx:
            for i in T.Parallel(128):
                v = T.if_then_else(bx * 128 + i < M, A[bx * 128 + i], T.float32(0))
                if T.if_then_else(bx * 128 + i < M, A[bx * 128 + i], T.float32(0)) > T.float32(0):
                    if bx * 128 + i < M:
                        C[bx * 128 + i] = v
                if bx * 128 + i < M:  # the gathered index is in bounds under the store's guard
                    C[bx * 128 + i] = T.if_then_else(
                        I[bx * 128 + i] < M and I[bx * 128 + i] >= 0, A[I[bx * 128 + i]], T.float32(0)
                    )

    assert_ir_equal(legalize_safe_memory_access(before), expected)


def test_guards_the_kernel_writes_itself_are_not_repeated():
    M = T.dynamic("m")

    @T.prim_func
    def before(A: T.Tensor((M,), "float32"), C: T.Tensor((M,), "float32")):
        with T.Kernel(T.ceildiv(M, 128), threads=128) as bx:
            for i in T.Parallel(128):
                if bx * 128 + i < M:
                    C[bx * 128 + i] = A[bx * 128 + i] * 2.0
                if bx * 128 + i < M:
                    C[bx * 128 + i] = T.if_then_else(bx * 128 + i < M, A[bx * 128 + i], 1.0)

    assert_ir_equal(legalize_safe_memory_access(before), before)


def test_element_atomic_target_index_is_guarded():
    M = T.dynamic("m")

    @T.prim_func
    def before(I: T.Tensor((M,), "int32"), C: T.Tensor((64,), "float32")):
        with T.Kernel(T.ceildiv(M, 128), threads=128) as bx:
            for i in T.Parallel(128):
                T.atomic_add(C[I[bx * 128 + i]], 1.0)

    out = legalize_safe_memory_access(before)
    (guard,) = collect(out.body, tirx.IfThenElse)
    text = str(guard.condition)
    # The index is read only for rows that exist, and the element it names must exist.
    assert "bx * 128 + i < m" in text and "< 64" in text and ">= 0" in text


def _scatter(kind):
    """Rows of S scattered into D at rows Idx[i] (an index may be 32: past D's end) by an atomic."""

    @T.prim_func
    def main(Idx: T.Tensor((64,), "int32"), S: T.Tensor((64, 8), "float32"), D: T.Tensor((32, 8), "float32")):
        with T.Kernel(1, threads=64):
            old = T.alloc_fragment((64,), "float32")
            for i in T.Parallel(64):
                if kind == "addx4":
                    T.atomic_addx4(D[Idx[i], 4], S[i, 4])
                elif kind == "addx2":
                    T.atomic_addx2(D[Idx[i], 6], S[i, 6])
                elif kind == "max":
                    T.atomic_max(D[Idx[i], 4], S[i, 4])
                elif kind == "add_ret":
                    old[i] = T.atomic_add(D[Idx[i], 4], S[i, 4], return_prev=True)
                elif kind == "load":
                    old[i] = T.atomic_load(D[Idx[i], 4])
                else:
                    T.atomic_store(D[Idx[i], 4], S[i, 4])
            for i in T.Parallel(64):
                S[i, 0] = old[i]

    return main


@pytest.mark.parametrize("kind", ["addx4", "addx2", "max", "add_ret", "load", "store"])
def test_every_atomic_runs_only_on_an_element_in_bounds(kind):
    """Every atomic (vector adds, max, old values, loads, stores) writes or reads only an element of
    D: a scatter index past its end (the unused slots of a sparse attention's index table) does
    nothing, as the plain T.atomic_add already did; an old value or load reads 0 there."""
    src = tilelang.compile(_scatter(kind), target="sm_90a").get_kernel_source()
    call = next(line for line in src.splitlines() if "tl::atomic" in line)
    guard = "(Idx_ptr[((int)threadIdx.x)] < 32) && (0 <= Idx_ptr[((int)threadIdx.x)])"
    assert guard in call or guard in src.split(call)[0].splitlines()[-1], src


def _tile_larger_than_tensor():
    @T.prim_func
    def main(A: T.Tensor((48, 40), "float16"), B: T.Tensor((48, 40), "float16")):
        with T.Kernel(1, threads=128):
            A_s = T.alloc_shared((64, 64), "float16")
            T.copy(A[0, 0], A_s)  # a 64 x 64 tile of a 48 x 40 tensor
            T.copy(A_s, B[0, 0])

    return main


def _c_expr(text, start):
    """The balanced parenthesized C expression of `text` at `start`, as Python."""
    depth = 0
    for end in range(start, len(text)):
        depth += {"(": 1, ")": -1}.get(text[end], 0)
        if depth == 0:
            break
    expr = text[start : end + 1].replace("((int)threadIdx.x)", "tx").replace("&&", " and ").replace("||", " or ")
    return compile(expr, "<kernel>", "eval")


def _accessed_elements(source, ptr):
    """The elements of `ptr` the kernel touches with 8-wide vectors, for every thread and iteration,
    checked on the way: each access sits under an `if` whose guard keeps it inside the 48 x 40 tensor."""
    lines = source.splitlines()
    touched = []
    for k, line in enumerate(lines):
        if f"({ptr} + " not in line:
            continue
        loop = next(re.search(r"for \(int (\w+) = 0; \1 < (\d+);", t) for t in lines[k::-1] if "for (int" in t)
        guard = next(t for t in lines[k - 1 :: -1] if t.strip().startswith("if ("))
        guard = _c_expr(guard, guard.index("if (") + 3)
        offset = _c_expr(line, line.index(f"({ptr} + ") + len(ptr) + 4)
        var, count = loop.group(1), int(loop.group(2))
        for tx in range(128):
            for r in range(count):
                scope = {"tx": tx, var: r}
                if eval(guard, scope):
                    at = eval(offset, scope)
                    assert 0 <= at and at + 8 <= 48 * 40 and at % 40 + 8 <= 40, (ptr, tx, r, at)
                    touched += range(at, at + 8)
    return touched


def test_a_copy_of_a_tile_larger_than_the_tensor_is_guarded_on_every_side():
    for arch in ("sm_80", "sm_90a"):
        kernel = tilelang.compile(_tile_larger_than_tensor(), target=arch)
        source = kernel.get_kernel_source()
        body = source[source.index("__global__") :]
        # Every element of B is written once, and only inside B.
        assert sorted(_accessed_elements(body, "B_ptr")) == list(range(48 * 40))
        if arch == "sm_80":
            # A's 1920 elements are read, the rest of the tile is zero (the `else` of the guard).
            assert sorted(_accessed_elements(body, "A_ptr")) == list(range(48 * 40))
            assert "condval = make_uint4(__pack_half2(__float2half_rn(0x0p+0f" in body
        else:
            # One TMA box of 64 x 64 over the 48 x 40 tensor: the hardware fills what lies outside with
            # zeros and counts the whole box's bytes.
            assert "A_ptr" not in body and body.count("tl::tma_load(A_tma0") == 1
            assert "tl::mbarrier_arrive_expect_tx((&(A_s_bar_ptr[0])), (uint)8192)" in body
        cuda.compile_object(source, kernel.target)
