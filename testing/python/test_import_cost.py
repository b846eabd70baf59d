"""`import tilelang` loads TVM (which brings torch, ml_dtypes and libtvm itself: nearly all of the
~3.5 s) and the T.* language, and nothing the first compile or a test needs alone: not the pass
pipeline, not pytest (which tvm.testing imports), not the tuner's or the tools' optional packages.
Checked in a fresh interpreter, where nothing else has imported them yet."""

import os
import subprocess
import sys
import textwrap

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")

# Imported on first use only (what each costs on an idle core, measured with python -X importtime).
DEFERRED = [
    "pytest",  # through tvm.testing, ~0.1-0.25 s; tilelang.tvm.testing imports it on first use
    "tvm.testing",
    "tilelang.testing",
    "tilelang.engine.pipeline",  # the passes: imported by the first compile
    "tilelang.transform",
    "tilelang.carver",
    "tilelang.tools",
    "matplotlib",
]


def _run(code: str) -> str:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def test_import_tilelang_defers_the_compiler_and_test_tools():
    out = _run(f"""
        import sys
        import tilelang
        import tilelang.language as T

        @tilelang.jit(out_idx=[-1])
        def add(N):
            @T.prim_func
            def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
                with T.Kernel(1, threads=128):
                    for i in T.Parallel(N):
                        B[i] = A[i] + 1.0
            return main

        print("loaded:", [m for m in {DEFERRED!r} if m in sys.modules])
    """)
    assert "loaded: []" in out, out


def test_tilelang_tvm_testing_imports_tvm_testing_on_first_use():
    out = _run("""
        import sys
        from tilelang import tvm
        print("before:", "tvm.testing" in sys.modules)
        import tvm.testing as real
        print("same:", tvm.testing.assert_allclose is real.assert_allclose)
        from tilelang.tvm.testing import requires_cuda
        import tilelang.testing
        print("requires:", requires_cuda is tilelang.testing.requires_cuda)
    """)
    assert "before: False" in out and "same: True" in out and "requires: True" in out, out
