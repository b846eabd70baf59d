"""What the flash-decoding example, its test and benchmark/flash_decoding share: a paged KV cache
with its block table and lengths, the fp32 torch reference (pages gathered into dense K/V per
sequence), and the figures they print (time, HBM bandwidth, the GPU's SM count)."""

import os

import torch

from tilelang.profiler import do_bench

# HBM3e peak of the H200 (4.8 TB/s), the yardstick for memory-bound kernels' bandwidth.
PEAK_HBM_GBS = 4800


def make_inputs(seqlens, heads, kv_heads, dim, page_size, device, dtype=torch.float16, seed=0):
    """q [B, H, D]; K and V caches [num_blocks, page_size, H_kv, D] whose pages are handed out in a
    random order (the kernel must follow the block table, not assume contiguous pages); block_table
    [B, max_pages] int32 (entries past a sequence's pages are -1, never read); cache_seqlens [B] int32.
    Random normals everywhere (never zeros: a kernel that skips work must not pass)."""
    gen = torch.Generator().manual_seed(seed)
    pages = [-(-n // page_size) for n in seqlens]
    max_pages = max(pages)
    num_blocks = sum(pages) + 3  # a few pages nobody owns
    order = torch.randperm(num_blocks, generator=gen).to(torch.int32)
    table = torch.full((len(seqlens), max_pages), -1, dtype=torch.int32)
    used = 0
    for b, n in enumerate(pages):
        table[b, :n] = order[used : used + n]
        used += n

    dev_gen = torch.Generator(device=device).manual_seed(seed)

    def randn(*shape):  # (drawn where the tensors live: the benchmark's caches are gigabytes)
        return torch.randn(*shape, generator=dev_gen, device=device, dtype=dtype)

    q = randn(len(seqlens), heads, dim)
    k_cache, v_cache = randn(num_blocks, page_size, kv_heads, dim), randn(num_blocks, page_size, kv_heads, dim)
    cache_seqlens = torch.tensor(seqlens, dtype=torch.int32, device=device)
    return q, k_cache, v_cache, table.to(device), cache_seqlens


def gather_dense(cache, block_table):
    """[B, max_pages * page_size, H_kv, D]: each sequence's pages in order (rows past its length hold
    whatever page the table names there; table entries of -1 take the last page, masked later)."""
    B, max_pages = block_table.shape
    pages = cache[block_table.long()]  # [B, max_pages, page_size, H_kv, D]
    return pages.reshape(B, max_pages * cache.shape[1], *cache.shape[2:])


def ref_decode(q, k_cache, v_cache, block_table, cache_seqlens):
    """softmax(q kᵀ / sqrt(D)) v per sequence in float32 over its first cache_seqlens[b] tokens, each
    KV head repeated for its group of query heads."""
    group = q.shape[1] // k_cache.shape[2]
    out = torch.empty(q.shape, dtype=torch.float32, device=q.device)
    K, V = gather_dense(k_cache, block_table), gather_dense(v_cache, block_table)
    for b, n in enumerate(cache_seqlens.tolist()):
        k, v = (x[b, :n].float().repeat_interleave(group, dim=1) for x in (K, V))  # [n, H, D]
        scores = torch.einsum("hd,nhd->hn", q[b].float(), k) / q.shape[-1] ** 0.5
        out[b] = torch.einsum("hn,nhd->hd", scores.softmax(dim=-1), v)
    return out


def kv_bytes(cache_seqlens, kv_heads, dim, elem_bytes=2):
    """Bytes of K and V the sequences hold: what a decode step must read from HBM."""
    return int(cache_seqlens.sum()) * kv_heads * dim * 2 * elem_bytes


def num_sms(device="cuda"):
    """The GPU's SMs (the CPU's cores: the CPU target runs a block per core)."""
    if device == "cpu":
        return os.cpu_count()
    return torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count


def time_ms(fn, device="cuda"):
    """Median time of fn() in milliseconds (on the GPU: L2 flushed before each run, so the KV cache
    comes from HBM)."""
    return do_bench(fn, return_mode="median", device=device)


def gbs(moved_bytes, ms):
    """Bandwidth in GB/s of `moved_bytes` read and written in `ms` milliseconds."""
    return moved_bytes / ms / 1e6
