"""The public TileLang's package-level helpers: cache switches over tilelang.cache, set_log_level,
register_cuda_postproc (tested with its module in engine/test_callback.py)."""

import logging
import os

import pytest

import tilelang
from tilelang import cache, env
from tilelang.errors import UserError


def test_cache_switches(monkeypatch):
    monkeypatch.setattr(env, "_cache_switch", dict(env._cache_switch))  # restored after the test
    tilelang.enable_cache()
    assert tilelang.is_cache_enabled() and cache.is_enabled()
    tilelang.disable_cache()
    assert not tilelang.is_cache_enabled() and not cache.is_enabled()


def test_clear_cache_removes_entries_and_libraries(monkeypatch, tmp_path):
    monkeypatch.setenv("TILELANG_CACHE_DIR", str(tmp_path))
    for sub in ("kernels/abc", "libs"):
        os.makedirs(tmp_path / sub)
    (tmp_path / "libs" / "k.so").write_bytes(b"x")
    (tmp_path / "other.txt").write_text("kept")
    tilelang.clear_cache()
    assert not (tmp_path / "kernels").exists() and not (tmp_path / "libs").exists()
    assert (tmp_path / "other.txt").exists()


def test_set_log_level(monkeypatch):
    logger = logging.getLogger("tilelang")
    monkeypatch.setattr(logger, "handlers", [])
    monkeypatch.setattr(logger, "level", logger.level)
    tilelang.set_log_level("info")
    assert logger.level == logging.INFO and len(logger.handlers) == 1
    tilelang.set_log_level(logging.DEBUG)
    assert logger.level == logging.DEBUG and len(logger.handlers) == 1
    # raised at the call: the traceback shows the user's line
    with pytest.raises(UserError, match="unknown level 'LOUD'"):
        tilelang.set_log_level("LOUD")


def test_names_exist_where_users_import_them():
    from tilelang.engine.callback import register_cuda_postproc_callback  # noqa: F401
    from tilelang.transform import PassConfigKey
    from tilelang.utils.tensor import TensorSupplyType

    assert tilelang.PassConfigKey is PassConfigKey and tilelang.TensorSupplyType is TensorSupplyType
