"""Two gemms reading one shared tile (test_select_gemm_instructions.py's kernel: a 128-row gemm and
a 32-row one, as an attention backward's S = K Q^T and dQ = dS^T K) compute the right numbers on the
GPU: they read the tile in the one layout it is stored in (the mma.sync gemm in the wgmma panels).
(On the H200 this was a wrong answer until the shared-memory merge counted TMA destinations as uses:
Q_s and dS_s shared bytes.)"""

import pytest
import torch
from test_select_gemm_instructions import _tile_read_by_two_gemms

import tilelang

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("rows_dq", [32, 64])
def test_two_gemms_reading_one_tile(rows_dq):
    k = torch.randn(128, 128, device="cuda", dtype=torch.float16)
    q = torch.randn(rows_dq, 128, device="cuda", dtype=torch.float16)
    ds = torch.randn(128, rows_dq, device="cuda", dtype=torch.float16)
    s, dq = tilelang.compile(_tile_read_by_two_gemms(rows_dq), out_idx=[3, 4])(k, q, ds)
    torch.testing.assert_close(s, k.float() @ q.float().T, rtol=1e-2, atol=1e-2)
    torch.testing.assert_close(dq, ds.float().T @ k.float(), rtol=1e-2, atol=1e-2)


def test_two_gemms_into_one_accumulator():
    # test_select_gemm_instructions.py's kernel: P = Q K^T + Qt Kt^T by two mma.sync gemms with the
    # same warps (one of them would be wgmma alone), and dK = P^T Q from P staged in shared memory.
    from test_select_gemm_instructions import _accumulator_of_two_gemms

    q, qt = (torch.randn(64, d, device="cuda", dtype=torch.float16) for d in (128, 64))
    k, kt = (torch.randn(32, d, device="cuda", dtype=torch.float16) for d in (128, 64))
    p, dk = tilelang.compile(_accumulator_of_two_gemms(), out_idx=[4, 5])(q, k, qt, kt)
    p_ref = q.float() @ k.float().T + qt.float() @ kt.float().T
    torch.testing.assert_close(p, p_ref, rtol=1e-2, atol=1e-2)
    torch.testing.assert_close(dk, p_ref.half().float().T @ q.float()[:, 64:], rtol=2e-2, atol=2e-1)


def test_an_mma_gemm_reading_its_a_operand_in_wgmma_panels():
    from test_select_gemm_instructions import _tile_read_as_a

    k = torch.randn(128, 128, device="cuda", dtype=torch.float16)
    q = torch.randn(32, 128, device="cuda", dtype=torch.float16)
    v = torch.randn(128, 64, device="cuda", dtype=torch.float16)
    s, o = tilelang.compile(_tile_read_as_a(), out_idx=[3, 4])(k, q, v)
    torch.testing.assert_close(s, k.float() @ q.float().T, rtol=1e-2, atol=1e-2)
    torch.testing.assert_close(o, q.float() @ v.float(), rtol=1e-2, atol=1e-2)
