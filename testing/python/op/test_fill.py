"""T.fill / T.clear: over a fragment or shared tile the block's threads share the work; over a
thread's own buffer (T.alloc_local, T.alloc_var) every thread fills its own; one element is a
region of one."""

import tilelang
import tilelang.language as T
from tilelang.codegen import cuda


def _kernel():
    @T.prim_func
    def main(A: T.Tensor((128,), "float32"), B: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128):
            acc = T.alloc_local((4,), "float32")
            v = T.alloc_var("float32")
            T.clear(acc)
            T.clear(v)
            T.fill(B[0], 1.0)
            tx = T.get_thread_binding()
            for k in T.serial(4):
                acc[k] = acc[k] + A[tx]
            v = acc[0] + acc[3]
            B[tx] = v

    return main


def test_a_threads_own_buffer_is_filled_by_every_thread():
    kernel = tilelang.compile(_kernel(), target="sm_80")
    src = kernel.get_kernel_source()
    # Every element of acc, in every thread: a plain loop, no thread guard or thread index.
    assert "for (int i0 = 0; i0 < 4; ++i0) {\n    acc_ptr[i0] = 0x0p+0f" in src
    assert "v_ptr[0] = 0x0p+0f" in src
    # One element of a global tensor: written once, by one thread.
    assert "if (((int)threadIdx.x) < 1) {\n    B_ptr[0] = 0x1p+0f" in src
    cuda.compile_object(src, kernel.target)
