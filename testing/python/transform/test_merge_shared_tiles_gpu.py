"""The kernels of test_merge_shared_tiles.py on the GPU: a binding of a T.alloc_var at the kernel's top,
a statement reading one tile while writing another (which must not share its bytes), a one-element
count merged beside a tile, and a tile loaded by TMA before a loop and read after it (the attention
sink of the public DeepSeek-V4 sparse attention, which the reduce workspace used to overwrite)."""

import pytest
import torch
from test_merge_shared_tiles import count_beside_a_tile, group_offset_then_tiles, sink_after_loop

import tilelang

pytestmark = pytest.mark.gpu


def test_group_offset_then_tiles():
    a = torch.tensor([1, 2, 3, 4], dtype=torch.int32, device="cuda")  # off = 2 * 10 = 20
    x = torch.randn(256, device="cuda")
    b = tilelang.compile(group_offset_then_tiles, out_idx=[-1])(a, x)
    s = x[20:148]  # S[i] = X[i + off]
    torch.testing.assert_close(b, s.flip(0) + s)


def test_count_beside_a_tile():
    a = torch.randint(-9, 10, (128,), dtype=torch.int32, device="cuda")
    b = tilelang.compile(count_beside_a_tile, out_idx=[-1])(a)
    torch.testing.assert_close(b, a.flip(0) + int(a[0]) % 8)


def test_sink_after_loop_keeps_its_values():
    x = torch.rand(4, 1024, device="cuda")
    sk = torch.randn(64, device="cuda").half()
    y = tilelang.compile(sink_after_loop, out_idx=[-1], target="sm_90a")(x, sk)
    torch.testing.assert_close(y, x.amax(dim=1) + sk[:4].float())
