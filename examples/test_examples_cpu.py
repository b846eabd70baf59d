"""Every example on the CPU target (`device="cpu"`), at small sizes, checked against torch by its own
`main()`: numbers, not only generated code, on a machine without a GPU (these run in CI). The GPU
test at the end runs one example's kernels unchanged on the GPU and on the CPU in one process."""

import importlib

import pytest

# (example module, the sizes its main() runs at on the CPU)
EXAMPLES = [
    ("example_elementwise_add", dict(N=10007, M=100, K=300)),
    ("example_transpose", dict(M=100, N=77)),
    ("example_softmax", dict(M=64, N=1000)),
    ("example_rms_norm", dict(M=64, N=1000)),
    ("example_gemm", dict(M=200, N=136, K=72)),
    ("example_gemm_persistent", dict(M=256, N=512, K=128, block_M=64, block_N=64, block_K=32)),
    ("example_mha_fwd_bshd", dict(batch=1, heads=2, seq_len=128, dim=64)),
    ("example_mha_fwd_bshd", dict(batch=1, heads=2, seq_len=128, dim=64, is_causal=True)),
    ("example_mha_fwd_bhsd", dict(batch=1, heads=2, seq_q=64, seq_kv=192, dim=64, is_causal=True)),
    ("example_gqa_fwd_bshd", dict(batch=1, heads=4, head_kv=2, seq_len=128, dim=64)),
    ("example_mha_bwd", dict(batch=1, heads=2, head_kv=1, seq_len=128, dim=64, is_causal=True)),
    ("example_mla_decode", dict(batch=1, heads=64, seqlen_kv=256)),
    ("example_mla_decode", dict(batch=1, heads=64, seqlen_kv=256, num_split=2)),
    ("example_gemv", dict(N=200, K=1000, block_N=4, block_K=256)),
    ("example_gemm_splitk", dict(M=16, N=256, K=1024, split_k=4)),
    ("example_gemm_splitk", dict(M=16, N=256, K=1024, split_k=4, combine="reduce")),
    ("example_gemm_fp8", dict(M=256, N=256, K=512, block_M=64, block_N=64)),
    ("example_gemm_fp8", dict(M=200, N=256, K=512, block_M=64, block_N=64, persistent=True)),
    ("example_gemm_fp8_blockscale", dict(M=256, N=256, K=512, block_M=64, block_N=128)),
    ("example_convolution", dict(N=2, C=32, H=15, W=13, F=72, K=3, S=2, P=1)),
    ("example_convolution", dict(N=1, C=16, H=12, W=12, F=48, K=3, D=2, P=2)),
    ("example_grouped_gemm", dict(E=8, N=192, K=160, total_tokens=700, block_M=64, block_N=64)),
    ("example_topk", dict(M=37, N=1000, k=5, rows=2, threads=64)),
    ("example_topk", dict(M=9, N=1000, k=5, threads=64, split=3)),
    ("example_moe_routing", dict(M=37, E=100, k=6, rows=2, threads=64)),
    ("example_moe_routing", dict(M=37, E=100, k=6, rows=2, threads=64, renormalize=False)),
    ("example_dequantize_gemm", dict(M=5, N=77, K=1152)),
    ("example_dequantize_gemm", dict(M=200, N=136, K=256, has_zeros=False)),
    (
        "example_flash_decoding",
        dict(seqlens=(1, 17, 100, 200), heads=8, kv_heads=2, dim=64, page_size=16, num_splits=3),
    ),
    (
        "example_flash_decoding",
        dict(seqlens=(1, 65, 300), heads=16, kv_heads=2, dim=64, page_size=64, num_splits=2, block_H=64),
    ),
    (
        "example_mha_fwd_varlen",
        dict(seqlens_q=(1, 100, 0, 130, 37, 5), seqlens_k=(3, 64, 7, 0, 200, 1), heads=4, kv_heads=2, dim=64,
             is_causal=True),
    ),
    ("example_blocksparse_attention", dict(batch=1, heads=2, seq_len=200, dim=64, density=0.3, is_causal=True)),
    ("example_nsa_fwd", dict(batch=1, heads=8, kv_heads=2, seq_len=100, dim=64, selected_blocks=3, block_size=16)),
    ("example_linear_attn_fwd", dict(batch=1, heads=2, seq_len=200, dim_k=64, dim_v=64, decay="token")),
    (
        "example_linear_attn_fwd",
        dict(batch=1, heads=2, seq_len=130, dim_k=128, dim_v=128, decay=None, dtype="bfloat16"),
    ),
    ("example_gated_delta_rule_fwd", dict(batch=1, heads=2, seq_len=200, dim_k=64, dim_v=64)),
]


@pytest.mark.parametrize("module, sizes", EXAMPLES, ids=[f"{m}-{k}" for k, (m, _) in enumerate(EXAMPLES)])
def test_example_on_the_cpu(module, sizes):
    importlib.import_module(module).main(**sizes, device="cpu")


@pytest.mark.gpu
def test_same_kernels_on_the_gpu_and_the_cpu():
    """One source, two targets: the GEMM and flash-attention examples run on the GPU, then on the CPU."""
    gemm = importlib.import_module("example_gemm")
    attention = importlib.import_module("example_mha_fwd_bshd")
    for device in ("cuda", "cpu"):
        gemm.main(M=256, N=256, K=128, device=device)
        attention.main(batch=1, heads=2, seq_len=128, dim=64, is_causal=True, device=device)
