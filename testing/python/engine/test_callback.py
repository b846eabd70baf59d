"""tilelang.engine.callback: a registered CUDA post-processor rewrites the generated device source
(what nvcc compiles and get_kernel_source shows), the disk cache is off while one is registered,
and the decorator takes the public TileLang's forms. Source only: no nvcc, no GPU."""

import pytest
import tvm_ffi

import tilelang
import tilelang.language as T
from tilelang import cache, env
from tilelang.engine import callback
from tilelang.errors import UserError


@pytest.fixture(autouse=True)
def no_hook_left():
    callback.unregister_cuda_postproc()
    yield
    callback.unregister_cuda_postproc()


def _kernel():
    @T.prim_func
    def fill(A: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128):
            for i in T.Parallel(128):
                A[i] = 0.0

    return fill


def test_the_hook_rewrites_the_device_source():
    seen = []

    @callback.register_cuda_postproc_callback
    def mark(code, target):
        seen.append(str(target.attrs["arch"]))
        return code.replace('#include "tl_templates/cuda/common.h"', '#include "tl_templates/cuda/common.h"\n// hooked')

    kernel = tilelang.compile(_kernel(), target="sm_80")
    assert "// hooked" in kernel.kernel_source and "__global__" in kernel.kernel_source
    assert seen == ["sm_80"]
    callback.unregister_cuda_postproc()
    assert "// hooked" not in tilelang.compile(_kernel(), target="sm_80").kernel_source


def test_decorator_forms_and_override():
    def first(code, target):
        return code

    def second(code, target):
        return code

    assert callback.register_cuda_postproc_callback()(first) is first
    # raised at the call: the traceback shows the user's line
    with pytest.raises(UserError, match="already registered"):
        callback.register_cuda_postproc_callback(override=False)(second)
    # raised at the call: the traceback shows the user's line
    with pytest.raises(UserError, match="already registered"):
        callback.register_cuda_postproc_callback(False)(second)  # a bool first argument is `override`
    callback.register_cuda_postproc(second)  # override=True by default
    assert callback.has_cuda_postproc()
    # raised at the call: the traceback shows the user's line
    with pytest.raises(UserError, match="expected a function"):
        callback.register_cuda_postproc("not a function")


def test_registered_through_tvm_ffi_directly():
    # The public TileLang's registry name: code that registers there directly is honoured too.
    tvm_ffi.register_global_func(callback.CUDA_POSTPROC, lambda code, target: "// direct\n" + code, override=True)
    assert tilelang.compile(_kernel(), target="sm_80").kernel_source.startswith("// direct\n")


def test_a_hook_must_return_source():
    callback.register_cuda_postproc(lambda code, target: None)
    # raised at the call: the traceback shows the user's line
    with pytest.raises(UserError, match="post-processor <lambda> returned NoneType, not the source code"):
        tilelang.compile(_kernel(), target="sm_80")


def test_disk_cache_is_off_while_a_hook_is_registered(monkeypatch):
    monkeypatch.setattr(env, "_cache_switch", {"on": True})
    assert cache.is_enabled()
    callback.register_cuda_postproc(lambda code, target: code)
    assert not cache.is_enabled() and not tilelang.is_cache_enabled()
    callback.unregister_cuda_postproc()
    assert cache.is_enabled()


def test_other_platforms_hooks_say_they_are_not_supported():
    for register in (callback.register_hip_postproc, callback.register_metal_postproc_callback):
        with pytest.raises(UserError, match="CUDA only"):  # raised at the call: the traceback shows the user's line
            register(lambda code, target: code)
    with pytest.raises(UserError, match="host launcher"):  # raised at the call: the traceback shows the user's line
        callback.register_c_postproc(lambda code, target: code)
