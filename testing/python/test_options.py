"""CompileOptions: pass_configs and the environment become one options object; unknown keys and
values of the wrong type are user errors, not silently ignored."""

import pytest

import tilelang
import tilelang.language as T
from tilelang.errors import UserError
from tilelang.options import DEFAULT_OPTIONS, CompileOptions, PassConfigKey


def test_keys_become_fields():
    opts = CompileOptions.from_pass_configs(
        {PassConfigKey.TL_ENABLE_FAST_MATH: True, "tl.disable_wgmma": 1, "tl.disable_tma_lower": None}
    )
    assert opts.fast_math and opts.disable_wgmma and not opts.disable_tma_lower
    assert CompileOptions.from_pass_configs(None) == DEFAULT_OPTIONS


def test_every_key_is_an_option_a_hint_or_refused():
    from tilelang.options import _FIELDS, _HINTS, _REFUSED

    for key in PassConfigKey:
        name = str(key)
        if name in _REFUSED:
            continue  # testing/python/test_pass_config_keys.py: what each accepts and refuses
        value = "/tmp/ir" if key in (PassConfigKey.TL_DUMP_IR, PassConfigKey.TL_DUMP_IR_DIR) else True
        CompileOptions.from_pass_configs({key: value})
        assert (
            name in _FIELDS
            or name in _HINTS
            or key
            in (
                PassConfigKey.TL_ENABLE_DUMP_IR,
                PassConfigKey.TL_DUMP_IR_DIR,
                PassConfigKey.TL_DISABLE_FAST_MATH,
            )
        ), name


def test_unknown_key_is_an_error_naming_it():
    # raised at the call: the traceback shows the user's line
    with pytest.raises(UserError, match="unknown key 'tl.enable_fastmath'.*tl.enable_fast_math"):
        CompileOptions.from_pass_configs({"tl.enable_fastmath": True})


def test_wrong_value_type_is_an_error():
    # raised at the call: the traceback shows the user's line
    with pytest.raises(UserError, match="'tl.disable_wgmma' takes True or False"):
        CompileOptions.from_pass_configs({"tl.disable_wgmma": "yes"})


def test_dump_ir_from_the_environment(monkeypatch):
    monkeypatch.setenv("TILELANG_DUMP_IR", "/tmp/somewhere")
    assert CompileOptions.from_pass_configs({}).dump_ir == "/tmp/somewhere"
    assert CompileOptions.from_pass_configs({"tl.dump_ir": "/tmp/other"}).dump_ir == "/tmp/other"


def test_compile_with_an_unknown_key_fails_before_lowering():
    @T.prim_func
    def main(A: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128):
            for i in T.Parallel(128):
                A[i] = 0.0

    # raised at the call: the traceback shows the user's line
    with pytest.raises(UserError, match="unknown key 'tl.no_such_option'"):
        tilelang.compile(main, target="sm_80", pass_configs={"tl.no_such_option": True})
