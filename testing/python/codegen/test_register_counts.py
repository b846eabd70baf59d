"""T.set_max_nreg checked against the register count ptxas launches the kernel with (nvcc -Xptxas
-v): a warpgroup raising its count to less than it is an error before the kernel runs, instead of
an illegal instruction on the GPU."""

import shutil

import pytest

import tilelang
import tilelang.language as T
from tilelang.codegen import cuda, register_counts
from tilelang.errors import UserError
from tilelang.testing import assert_points_at

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")


def _warpgroups(first, second, producer):
    """Three warpgroups with their setmaxnreg counts; the first holds a 64x256 accumulator."""

    @T.prim_func
    def main(A: T.Tensor((64, 64), "float16"), B: T.Tensor((64, 256), "float16"), C: T.Tensor((64, 256), "float32")):
        with T.Kernel(1, threads=384):
            A_s = T.alloc_shared((64, 64), "float16")
            B_s = T.alloc_shared((64, 256), "float16")
            T.copy(A, A_s)
            T.copy(B, B_s)
            tx = T.get_thread_binding()
            if tx < 128:
                T.set_max_nreg(first, 1)
                acc = T.alloc_fragment((64, 256), "float32")
                T.gemm(A_s, B_s, acc, clear_accum=True)
                T.copy(acc, C)
            elif tx < 256:
                T.set_max_nreg(second, 1)
            else:
                T.set_max_nreg(producer, 0)

    return main


def _source(func):
    return tilelang.compile(func, target="sm_90a").get_kernel_source()


@needs_nvcc
def test_raising_below_the_launch_count_is_an_error():
    # Two warpgroups raising to different counts: ptxas launches at the 384-thread cap, 168.
    src = _source(_warpgroups(240, 160, 24))
    target = tilelang.utils.target.determine_target("sm_90a")
    message = r"T.set_max_nreg\(160, 1\) in kernel '\w+': ptxas launches the kernel with 168"
    assert "tl::setmaxnreg_inc<160>();  // T.set_max_nreg at " in src  # the user's line, for the check
    with pytest.raises(UserError, match=message) as err:
        cuda.compile_object(src, target)
    assert_points_at(err, "T.set_max_nreg(second, 1)")
    cuda.compile_object(_source(_warpgroups(240, 240, 24)), target)


def test_report_parsing():
    log = (
        "ptxas info    : Compiling entry function 'a_kernel' for 'sm_90a'\n"
        "ptxas info    : Used 58 registers, used 1 barriers\n"
        "ptxas info    : Compiling entry function 'b_kernel' for 'sm_90a'\n"
        "ptxas info    : Used 168 registers, used 8 barriers\n"
    )
    assert register_counts.launch_counts(log) == {"a_kernel": 58, "b_kernel": 168}
    src = (
        'extern "C" __global__ void __launch_bounds__(256) a_kernel(int* x) {\n  tl::setmaxnreg_inc<64>();\n}\n'
        'extern "C" __global__ void __launch_bounds__(384) b_kernel(int* x) {\n  tl::setmaxnreg_inc<160>();\n}\n'
    )
    # 58 registers are allocated as 64: raising to 64 is fine; b's 160 is below its 168, and the
    # comment the code generator leaves after a user's call names the line.
    src = src.replace("<160>();", f"<160>();  // T.set_max_nreg at {__file__}:{_line_of('# b asks for 160')}")
    with pytest.raises(UserError, match=r"T.set_max_nreg\(160, 1\) in kernel 'b_kernel'.*at least 168") as err:
        register_counts.check(cuda.kernel_bodies(src), log)  # b asks for 160
    assert_points_at(err, "# b asks for 160")


def _line_of(marker: str) -> int:
    with open(__file__) as f:
        return next(k for k, line in enumerate(f, 1) if marker in line and "_line_of" not in line)


def test_setmaxnreg_kernels_run_one_block_per_sm():
    # Without a minimum of blocks per SM ptxas may drop every setmaxnreg (remark C7508), and the
    # consumers spill at the launch count (seen in a three-warpgroup MLA decode kernel).
    src = _source(_warpgroups(240, 240, 24))
    assert "__launch_bounds__(384, 1) main_kernel(" in src
    assert "__launch_bounds__(384)" not in src


def test_a_dropped_setmaxnreg_is_reported():
    src = 'extern "C" __global__ void __launch_bounds__(384) k(int* x) {\n  tl::setmaxnreg_inc<240>();\n}\n'
    log = (
        "ptxas info    : (C7508) Potential Performance Loss: 'setmaxnreg' ignored; "
        "unable to determine register count at entry.\n"
        "ptxas info    : Compiling entry function 'k' for 'sm_90a'\n"
        "ptxas info    : Used 168 registers, used 1 barriers\n"
    )
    with pytest.warns(UserWarning, match=r"ptxas ignored T.set_max_nreg in k"):
        register_counts.check(cuda.kernel_bodies(src), log)
