"""T.cumsum on the region it is given: a sub-tile, and a tile a pipeline multi-buffers (the stage's copy,
along the user's dimension). CPU: generated code for sm_80 and numbers on the CPU target."""

import re

import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang.errors import UserError
from tilelang.testing import assert_points_at


def chunked_prefix_sums(inplace: bool, n=256, chunk=64, num_stages=2):
    """Out = the prefix sums of each chunk of G, the chunks loaded by a pipelined loop."""

    @T.prim_func
    def main(G: T.Tensor([n], "float32"), Out: T.Tensor([n], "float32")):
        with T.Kernel(1, threads=128):
            g_shared = T.alloc_shared([chunk], "float32")
            c_shared = T.alloc_shared([chunk], "float32")
            for c in T.Pipelined(n // chunk, num_stages=num_stages):
                T.copy(G[c * chunk : (c + 1) * chunk], g_shared)
                if inplace:
                    T.cumsum(g_shared)
                    T.copy(g_shared, Out[c * chunk : (c + 1) * chunk])
                else:
                    T.cumsum(g_shared, c_shared)
                    T.copy(c_shared, Out[c * chunk : (c + 1) * chunk])

    return main


@pytest.mark.parametrize("inplace", [True, False])
def test_a_multi_buffered_tile_is_scanned_along_its_own_dimension(inplace):
    # The pipeline gives g_shared a leading stage dimension (2, 64); the scan reads this stage's 64
    # values. Before, it scanned across the two stage copies in place (wrong numbers on the GPU) and
    # stopped in lower_tile_ops with a destination ("c_shared is 1-dimensional ...").
    # The destination, when it is another tile (not multi-buffered: one dimension fewer than the stage
    # copy), gets each of the 64 values at its own position; it got them all at position 0 (the line's
    # index was read from the source's dimensions; wrong numbers on the H200).
    for target in ("sm_80", "sm_90a"):
        src = tilelang.compile(chunked_prefix_sums(inplace), out_idx=[-1], target=target).get_kernel_source()
        stage = r"\(\(\w+ & 1\) \* 64\)"  # the stage's copy (the loop variable is `i` on sm_90a)
        assert re.search(rf"line_ptr\[k\] = \S+\[\({stage} \+ k\)\];", src)
        dst = rf"\({stage} \+ w\)" if inplace else r"\(w \+ \d+\)"
        assert re.search(rf"\S+\[{dst}\] = line_ptr\[w\];", src)
    G = torch.randn(256)
    out = tilelang.compile(chunked_prefix_sums(inplace), out_idx=[-1], target="cpu")(G)
    torch.testing.assert_close(out, G.view(4, 64).cumsum(1).view(-1), rtol=1e-5, atol=1e-5)


def sub_tile_prefix_sums(rows, reverse):
    @T.prim_func
    def main(A: T.Tensor([32, 64], "float32"), B: T.Tensor([32, 64], "float32")):
        with T.Kernel(1, threads=128):
            s = T.alloc_shared([32, 64], "float32")
            T.copy(A, s)
            T.cumsum(s[8 : 8 + rows, 0:64], dim=1, reverse=reverse)
            T.copy(s, B)

    return main


@pytest.mark.parametrize("reverse", [False, True])
def test_a_sub_tile_is_scanned_and_the_rest_left_alone(reverse):
    A = torch.randn(32, 64)
    B = tilelang.compile(sub_tile_prefix_sums(16, reverse), out_idx=[-1], target="cpu")(A)
    part = A[8:24].flip(1).cumsum(1).flip(1) if reverse else A[8:24].cumsum(1)
    ref = torch.cat([A[:8], part, A[24:]])
    torch.testing.assert_close(B, ref, rtol=1e-5, atol=1e-5)


def test_source_and_destination_regions_of_different_shapes_are_the_users_error():
    with pytest.raises(UserError, match=r"the source 's' has shape \[16, 64\] here but the destination 'd'") as err:

        @T.prim_func
        def main(A: T.Tensor([32, 64], "float32")):
            with T.Kernel(1, threads=128):
                s = T.alloc_shared([32, 64], "float32")
                d = T.alloc_shared([32, 64], "float32")
                T.copy(A, s)
                T.cumsum(s[0:16, 0:64], d)

    assert_points_at(err, "T.cumsum(s[0:16, 0:64], d)")
