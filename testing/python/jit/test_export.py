"""export_library / load_library without a GPU: the files written, loading in a process where tvm
and the tilelang compiler cannot be imported, argument errors, and output allocation."""

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang.jit import exported


@tilelang.jit(out_idx=[-1], target="sm_80")
def double(N):
    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, 128), threads=128) as bx:
            for i in T.Parallel(128):
                B[bx * 128 + i] = A[bx * 128 + i] * 2.0

    return main


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("export") / "double.so")
    double(4096).export_library(path)  # builds with nvcc; no GPU needed
    return path


def test_export_writes_the_library_and_its_sidecar(library):
    with open(library + ".json") as f:
        meta = json.load(f)
    assert meta["format"] == "tilelang-exported-kernel" and meta["version"] == 1
    assert meta["name"] == "double" and meta["out_idx"] == [1] and meta["arch"] == "sm_80"
    assert [(p["name"], p["shape"], p["dtype"]) for p in meta["params"]] == [
        ("A", [4096], "float32"),
        ("B", [4096], "float32"),
    ]


def test_load_library_gives_a_kernel_like_the_jit_one(library):
    kernel = tilelang.load_library(library)
    assert kernel.name == "double" and kernel.out_idx == [1]
    assert [tuple(p) for p in kernel.params] == [
        ("A", (4096,), "float32", "tensor"),
        ("B", (4096,), "float32", "tensor"),
    ]
    assert "double(A: float32[4096], B: float32[4096]) for sm_80" in repr(kernel)
    with pytest.raises(ValueError, match=r"double: parameter 'A' \(argument #0\) .* got device cpu"):
        kernel(torch.randn(4096))
    with pytest.raises(ValueError, match=r"got dtype float16, shape \[10\], device cpu"):
        kernel(torch.randn(10).half())
    with pytest.raises(ValueError, match=r"double takes 1 input tensors \(A\), got 2"):
        kernel(torch.randn(4096), torch.randn(4096))
    with pytest.raises(ValueError, match="got float 3.0"):
        kernel(3.0)


# Runs with `import tvm` and `import tilelang` failing: the loader must need neither.
NO_COMPILER = textwrap.dedent("""
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
    kernel = exported.load_library(sys.argv[2])
    print(kernel.name, kernel.out_idx, [tuple(p) for p in kernel.params])
""")


def test_loader_runs_without_tvm_and_tilelang(library):
    code = NO_COMPILER + textwrap.dedent("""
        import torch
        try:
            kernel(torch.randn(4096))
        except ValueError as err:
            print("error:", err)
        assert not [m for m in sys.modules if m == "tvm" or m.startswith(("tvm.", "tilelang"))]
    """)
    out = subprocess.run(
        [sys.executable, "-c", code, exported.__file__, library], capture_output=True, text=True, check=True
    ).stdout
    assert "double [1] [('A', (4096,), 'float32', 'tensor'), ('B', (4096,), 'float32', 'tensor')]" in out
    assert "error: double: parameter 'A' (argument #0) expects a CUDA tensor of shape [4096]" in out


def test_a_library_that_does_not_match_its_sidecar_is_refused(library, tmp_path):
    copy = str(tmp_path / "copy.so")
    with open(library, "rb") as src, open(copy, "wb") as dst:
        dst.write(src.read()[:-1])
    with open(library + ".json") as src, open(copy + ".json", "w") as dst:
        dst.write(src.read())
    with pytest.raises(ValueError, match="not the library .* describes"):
        tilelang.load_library(copy)
    os.remove(copy + ".json")
    with pytest.raises(FileNotFoundError, match=r"copy.so.json does not exist"):
        tilelang.load_library(copy)


def test_an_unknown_sidecar_version_is_refused(library, tmp_path):
    with open(library + ".json") as f:
        meta = json.load(f)
    meta["version"] = 99
    path = str(tmp_path / "k.so")
    with open(library, "rb") as src, open(path, "wb") as dst:
        dst.write(src.read())
    with open(path + ".json", "w") as f:
        json.dump(meta, f)
    with pytest.raises(ValueError, match="not a version-1 tilelang export"):
        tilelang.load_library(path)


def fake_exported(params, out_idx):
    """An ExportedKernel whose launch records its arguments instead of running on a GPU."""
    kernel = exported.ExportedKernel.__new__(exported.ExportedKernel)
    kernel.name, kernel.arch, kernel.path = "fake", "sm_80", "fake.so"
    kernel.params = [exported.Param(n, tuple(s), d) for n, s, d in params]
    kernel.out_idx = out_idx
    kernel._in_idx = [k for k in range(len(params)) if k not in out_idx]
    kernel.launched = []
    kernel._func = lambda *args: kernel.launched.append(args)
    return kernel


def test_outputs_are_allocated_from_dynamic_dimensions():
    kernel = fake_exported(
        [("X", ["m", 8], "float16"), ("Y", ["n"], "int32"), ("Z", ["m * 2", "max(n, 4)"], "float32")], [2]
    )
    z = kernel(torch.randn(5, 8).half(), torch.zeros(3, dtype=torch.int32))
    assert z.shape == (10, 4) and z.dtype == torch.float32 and kernel.launched[0][2] is z
    missing = fake_exported([("X", [8], "float16"), ("Z", ["k"], "float32")], [1])
    with pytest.raises(ValueError, match="cannot allocate output 'Z' of shape \\['k'\\]: no input has .* 'k'"):
        missing(torch.randn(8).half())


def test_sidecar_expressions_cannot_run_code():
    with pytest.raises(ValueError, match="unsupported dimension expression"):
        exported._evaluate(exported.ast.parse("__import__('os').getpid()", mode="eval").body, {})
