"""tilelang.env's public-TileLang names: attributes that read the environment when read, and
assignments that set it."""

import os

import pytest

import tilelang
from tilelang import env


def test_cache_dir_reads_and_sets_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("TILELANG_CACHE_DIR", str(tmp_path / "a"))
    assert tilelang.env.TILELANG_CACHE_DIR == str(tmp_path / "a") == env.cache_dir()
    tilelang.env.TILELANG_CACHE_DIR = str(tmp_path / "b")
    assert os.environ["TILELANG_CACHE_DIR"] == str(tmp_path / "b") == env.cache_dir()


def test_default_cache_dir(monkeypatch):
    monkeypatch.delenv("TILELANG_CACHE_DIR", raising=False)
    assert env.TILELANG_CACHE_DIR == os.path.join(os.path.expanduser("~"), ".tilelang", "cache")


def test_toolkit_paths():
    from tilelang.env import CUTLASS_INCLUDE_DIR, TILELANG_TEMPLATE_PATH

    assert os.path.isdir(os.path.join(TILELANG_TEMPLATE_PATH, "tl_templates"))
    assert CUTLASS_INCLUDE_DIR == env.cutlass_include()
    with pytest.raises(AttributeError, match="cannot be assigned"):
        tilelang.env.TILELANG_TEMPLATE_PATH = "/elsewhere"


def test_cuda_home(monkeypatch):
    monkeypatch.setenv("CUDA_HOME", "/opt/cuda")
    assert env.CUDA_HOME == "/opt/cuda"
    monkeypatch.delenv("CUDA_HOME")
    try:
        nvcc = env.nvcc_path()
    except RuntimeError:
        pytest.skip("no nvcc")
    home = env.CUDA_HOME
    assert os.path.exists(os.path.join(home, "bin", "nvcc")), (home, nvcc)


def test_env_object_and_cache_switches(monkeypatch):
    from tilelang.env import env as env_object

    assert env_object.TILELANG_CACHE_DIR == env.cache_dir()
    monkeypatch.setattr(env, "_cache_switch", dict(env._cache_switch))  # restored after the test
    env_object.disable_cache()
    assert not tilelang.is_cache_enabled() and not env_object.is_cache_enabled()
    env_object.enable_cache()
    assert tilelang.is_cache_enabled()


def test_unknown_name():
    with pytest.raises(AttributeError, match="no attribute 'NOT_A_SETTING'"):
        tilelang.env.NOT_A_SETTING  # noqa: B018
