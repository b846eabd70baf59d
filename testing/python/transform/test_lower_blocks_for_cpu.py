"""lower_blocks_for_cpu: a kernel's blocks become one parallel loop, its threads and on-chip scopes
go, thread branches run in program order (CPU: the IR)."""

from tvm import tirx

import tilelang.language as T
from tilelang.transform.lower_blocks_for_cpu import lower_blocks_for_cpu
from tilelang.utils.ir import collect


def _kernel():
    @T.prim_func
    def main(A: T.Tensor((64, 256), "float32"), B: T.Tensor((64, 256), "float32")):
        with T.Kernel(4, 2, threads=256) as (bx, by):
            S = T.alloc_shared((32, 64), "float32")
            F = T.alloc_fragment((32, 64), "float32")
            tx = T.get_thread_binding()
            for k in T.Pipelined(2, num_stages=2):
                for i, j in T.Parallel(32, 64):
                    S[i, j] = A[by * 32 + i, bx * 64 + j] * k
            T.sync_threads()
            if tx < 128:
                for i, j in T.Parallel(32, 64):
                    F[i, j] = S[i, j] + 1.0
            else:
                for i, j in T.Parallel(32, 64):
                    F[i, j] = S[i, j] - 1.0
            for i, j in T.Parallel(32, 64):
                B[by * 32 + i, bx * 64 + j] = F[i, j]

    return main


def test_blocks_become_one_parallel_loop_with_their_indices_bound():
    body = lower_blocks_for_cpu(_kernel()).body
    assert not any(a.attr_key == "thread_extent" for a in collect(body, tirx.AttrStmt))
    loops = collect(body, tirx.For)
    parallel = [f for f in loops if f.kind == tirx.ForKind.PARALLEL]
    assert len(parallel) == 1 and parallel[0].extent.value == 8  # 4 x 2 blocks, one per iteration
    binds = {b.var.name: str(b.value) for b in collect(parallel[0].body, tirx.Bind)}
    assert binds == {"bx": "block % 4", "by": "block // 4"}  # blockIdx.x fastest, as on a GPU


def test_tiles_are_local_loops_serial_and_annotations_gone():
    body = lower_blocks_for_cpu(_kernel()).body
    assert {s.buffer.scope() for s in collect(body, tirx.AllocBuffer)} == {"local"}
    inner = [f for f in collect(body, tirx.For) if f.kind != tirx.ForKind.PARALLEL]
    assert all(f.kind == tirx.ForKind.SERIAL and not f.annotations for f in inner)


def test_thread_branches_run_then_before_else_and_barriers_go():
    body = lower_blocks_for_cpu(_kernel()).body
    assert collect(body, tirx.IfThenElse) == []
    calls = [getattr(c.op, "name", "") for c in collect(body, tirx.Call)]
    assert "tirx.tvm_storage_sync" not in calls
    values = [str(s.value) for s in collect(body, tirx.BufferStore) if s.buffer.name == "F"]
    assert values == ["S[i, j] + T.float32(1.0)", "S[i, j] - T.float32(1.0)"]  # then part, then else part
