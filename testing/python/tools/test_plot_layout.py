"""tilelang.tools.plot_layout: fragments and layouts drawn to files (matplotlib optional: without it
the call is a UserError that says how to get it)."""

import builtins

import pytest

from tilelang.errors import UserError
from tilelang.layout.fragment import partition
from tilelang.layout.layout import swizzle
from tilelang.tools import plot_layout


def test_without_matplotlib_the_error_says_so(monkeypatch, tmp_path):
    real_import = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name.startswith("matplotlib"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    # raised at the call: the traceback shows the user's line
    with pytest.raises(UserError, match="needs matplotlib.*pip install matplotlib"):
        plot_layout(partition((16, 16), 32), save_directory=str(tmp_path))


def test_bad_arguments(tmp_path):
    # raised at the call: the traceback shows the user's line
    with pytest.raises(UserError, match="expected a Fragment or a Layout, got list"):
        plot_layout([1, 2], save_directory=str(tmp_path))
    with pytest.raises(UserError, match="unknown format"):  # raised at the call: the traceback shows the user's line
        plot_layout(partition((16, 16), 32), save_directory=str(tmp_path), formats="jpg")
    # raised at the call: the traceback shows the user's line
    with pytest.raises(UserError, match="view must be 'input' or 'output'"):
        plot_layout(swizzle((8, 64), 16, 3), save_directory=str(tmp_path), view="sideways")


def test_fragment_and_layout_files(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    frag = partition((16, 16), 32, 2)
    paths = plot_layout(frag, save_directory=str(tmp_path), name="frag", formats="png,svg", verbose=True)
    assert [p.rsplit("/", 1)[1] for p in paths] == ["frag.png", "frag.svg"]
    assert (tmp_path / "frag.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    svg = (tmp_path / "frag.svg").read_text()
    assert "<svg" in svg
    # Element (0, 2): thread 1, register 0 (two consecutive elements per thread).
    assert "[0, 2] -> threads 1, register 0" in capsys.readouterr().out

    layout = swizzle((8, 64), 16, 3)
    (pdf,) = plot_layout(layout, save_directory=str(tmp_path), name="swizzle")
    assert pdf.endswith("swizzle.pdf") and (tmp_path / "swizzle.pdf").read_bytes()[:4] == b"%PDF"
    plot_layout(layout, save_directory=str(tmp_path), name="swizzle_mem", formats="all", view="output")
    assert {p.name for p in tmp_path.iterdir()} >= {"swizzle_mem.pdf", "swizzle_mem.png", "swizzle_mem.svg"}
    # raised at the call: the traceback shows the user's line
    with pytest.raises(UserError, match="does not hold the 512 elements"):
        plot_layout(layout, save_directory=str(tmp_path), grid_shape=(4, 4))
