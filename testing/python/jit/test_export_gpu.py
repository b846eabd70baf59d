"""An exported kernel runs in a fresh process that cannot import tvm or tilelang (needs a GPU)."""

import subprocess
import sys
import textwrap

import pytest

import tilelang
import tilelang.language as T
from tilelang.jit import exported

pytestmark = pytest.mark.gpu


@tilelang.jit(out_idx=[-1])
def saxpy(N, alpha=3.0):
    @T.prim_func
    def main(X: T.Tensor((N,), "float32"), Y: T.Tensor((N,), "float32"), Z: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, 256), threads=256) as bx:
            for i in T.Parallel(256):
                Z[bx * 256 + i] = X[bx * 256 + i] * alpha + Y[bx * 256 + i]

    return main


def test_exported_kernel_runs_without_the_compiler(tmp_path):
    path = str(tmp_path / "saxpy.so")
    saxpy(10000).export_library(path)
    code = textwrap.dedent("""
        import importlib.abc, importlib.util, sys

        class NoCompiler(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("tvm", "tilelang"):
                    raise ImportError(f"{name} is blocked in this test")
                return None

        sys.meta_path.insert(0, NoCompiler())
        spec = importlib.util.spec_from_file_location("exported", sys.argv[1])
        exported = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(exported)
        import torch

        kernel = exported.load_library(sys.argv[2])
        x, y = torch.randn(10000, device="cuda"), torch.randn(10000, device="cuda")
        torch.testing.assert_close(kernel(x, y), x * 3.0 + y)
        try:
            kernel(x[:100], y)
        except ValueError as err:
            print("error:", err)
        print("exported kernel ok")
    """)
    out = subprocess.run(
        [sys.executable, "-c", code, exported.__file__, path], capture_output=True, text=True, check=True
    ).stdout
    assert "exported kernel ok" in out
    assert "error: saxpy: parameter 'X' (argument #0) expects a CUDA tensor of shape [10000]" in out
