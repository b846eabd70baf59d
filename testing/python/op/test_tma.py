"""TMA copies: which tiles can be one, and which boxes and hardware swizzle write a shared layout."""

import pytest
from tvm import tirx

from tilelang.layout import layout as sl
from tilelang.op import base, tma


def _region(buffer, starts, extents):
    return base.Region(buffer, [tirx.const(s, "int32") if isinstance(s, int) else s for s in starts], list(extents))


def _tile(shape=(1024, 1024), tile=(128, 64), dtype="float16", dst_dtype=None):
    g = tirx.decl_buffer(shape, dtype, "A")
    s = tirx.decl_buffer(tile, dst_dtype or dtype, "A_s", scope="shared.dyn")
    src = _region(
        g,
        [0] * len(shape),
        [tirx.const(1, "int32")] * (len(shape) - len(tile)) + [tirx.const(t, "int32") for t in tile],
    )
    dst = _region(s, [0] * len(tile), [tirx.const(t, "int32") for t in tile])
    return tma.tile_of(src, dst)


@pytest.mark.parametrize("bits,width", [(3, 64), (2, 32), (1, 16)])
def test_gmma_panels_are_written_one_swizzled_box_per_panel(bits, width):
    tile = _tile(tile=(128, 128))
    layout = sl.gmma_panels((128, 128), 16, bits)
    assert tma.box_plan(tile, layout) == (bits, width)  # CUtensorMapSwizzle 3/2/1 = 128/64/32 bytes


def test_multi_buffered_panels_match_every_stage():
    tile = _tile(tile=(64, 256))
    assert tma.box_plan(tile, sl.gmma_panels((3, 64, 256), 16, 3)) == (3, 64)


def test_row_major_tiles_are_one_unswizzled_box():
    assert tma.box_plan(_tile(tile=(64, 128)), None) == (0, 128)


def test_a_layout_the_tma_unit_cannot_write_is_rejected():
    tile = _tile(tile=(64, 64))
    # Padding each row by 8 elements (a common bank-conflict fix) is no TMA swizzle.
    v = sl.placeholder_vars(2)
    padded = sl.Layout((64, 64), v, v[0] * 72 + v[1], 64 * 72)
    assert tma.box_plan(tile, padded) is None


def test_the_ldmatrix_swizzle_of_128_byte_rows_is_the_tma_128_byte_swizzle():
    assert tma.box_plan(_tile(tile=(128, 64)), sl.swizzle((128, 64), 16, 3)) == (3, 64)


@pytest.mark.parametrize(
    "kwargs,reason",
    [
        ({"dst_dtype": "float32"}, "converts"),
        ({"shape": (1024, 1004), "tile": (128, 64), "dtype": "float16"}, "multiple of 16 bytes"),
        ({"tile": (512, 64)}, "past 256"),
    ],
)
def test_copies_that_cannot_be_tma_say_why(kwargs, reason):
    out = _tile(**kwargs)
    assert isinstance(out, str) and reason in out


def test_a_tile_of_a_4d_tensor_spans_its_unit_dimensions():
    tile = _tile(shape=(2, 4096, 8, 128), tile=(64, 128))
    assert not isinstance(tile, str)
    assert (tile.rows, tile.cols, tile.tile_bytes) == (64, 128, 64 * 128 * 2)
