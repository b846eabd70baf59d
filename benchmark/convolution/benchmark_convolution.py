"""2-D convolution (fp16, fp32 accumulation, NHWC) beside torch's conv2d (cuDNN, channels_last), same
run, same inputs.

For each shape: the example's kernel (examples/convolution) with its default tiles and the best of a
few tile configurations, beside torch.nn.functional.conv2d on the same tensors seen as NCHW in the
channels_last memory format (cudnn.benchmark on, so cuDNN picks its fastest algorithm). Every kernel
is checked against an fp32 reference before it is timed; each row's functions are timed in turn,
median of rounds (the GPU's clocks drift between runs). Run on a GPU machine:
    python benchmark/convolution/benchmark_convolution.py [--quick]
"""

import argparse
import functools
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "convolution"))
from conv_common import conv_flops, make_inputs, ref_conv2d, torch_layouts  # noqa: E402
from example_convolution import conv2d  # noqa: E402

from tilelang.profiler import do_bench_in_turn  # noqa: E402

# (block_M, block_N, block_K, stages, threads). The first is the example's default: 128 pixels x 128
# filters x 64 taps-channels, 3 stages of 32 KiB. Then a deeper pipeline, 256-filter tiles (fewer
# re-reads of the gathered pixels, 48 KiB a stage), 32-deep K steps on 4 warps, and 64-pixel tiles
# (more blocks for small outputs).
CONFIGS = [
    (128, 128, 64, 3, 256),
    (128, 128, 64, 4, 256),
    (128, 256, 64, 3, 256),
    (128, 128, 32, 4, 128),
    (64, 128, 64, 4, 128),
    (128, 64, 64, 4, 128),
]
# (N, C, H, W, F, K, S, D, P): ResNet-like 3 x 3 layers (stride 1 and 2), 1 x 1 bottleneck layers
# that expand and reduce channels, and a diffusion U-Net / VAE 3 x 3 layer of 320 channels.
SHAPES = [
    (128, 128, 64, 64, 128, 3, 1, 1, 1),
    (32, 256, 28, 28, 256, 3, 1, 1, 1),
    (32, 256, 28, 28, 256, 3, 2, 1, 1),
    (32, 512, 14, 14, 512, 3, 1, 1, 1),
    (32, 64, 56, 56, 256, 1, 1, 1, 0),
    (32, 256, 56, 56, 64, 1, 1, 1, 0),
    (8, 320, 64, 64, 320, 3, 1, 1, 1),
]


def configs_for(F):
    """The tile configurations worth trying: none wider than both the filters and the default tile
    (its last columns would be zeros)."""
    return [c for c in CONFIGS if c[1] <= max(F, CONFIGS[0][1])]


def bench(shape):
    N, C, H, W, F, K, S, D, P = shape
    configs = configs_for(F)
    kernels = conv2d.par_compile([(*shape, *c) for c in configs])
    # Checked on inputs other than the timed ones: a kernel that wrote nothing must not pass.
    data, weight = make_inputs(N, C, H, W, F, K)
    ref = ref_conv2d(data, weight, S, D, P)
    for config, kernel in zip(configs, kernels):
        out = kernel(data, weight).float()
        torch.testing.assert_close(out, ref, rtol=5e-3, atol=1e-2, msg=lambda m, c=config: f"{shape} {c}: {m}")
    del ref
    data, weight = make_inputs(N, C, H, W, F, K)
    x, w = torch_layouts(data, weight)
    fns = {config: functools.partial(kernel, data, weight) for config, kernel in zip(configs, kernels)}
    fns["cudnn"] = functools.partial(torch.nn.functional.conv2d, x, w, None, S, P, D)
    ms = do_bench_in_turn(fns, rounds=3)
    best = min(configs, key=lambda c: ms[c])
    return shape, ms[CONFIGS[0]], best, ms[best], ms["cudnn"]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="two shapes")
    args = parser.parse_args()
    torch.backends.cudnn.benchmark = True
    shapes = SHAPES[:2] if args.quick else SHAPES
    rows = [bench(shape) for shape in shapes]
    print(f"conv2d, fp16 NHWC, fp32 accumulation; default tiles {CONFIGS[0]}; best of (block_M, block_N, block_K,")
    print("stages, threads) in CONFIGS; cuDNN: torch conv2d, channels_last; speedup = cuDNN ms / best ms")
    print(
        f"{'N':>4} {'C':>4} {'H':>3} {'W':>3} {'F':>4} {'K':>2} {'S':>2} {'D':>2} {'P':>2} {'default ms':>10} "
        f"{'best':>24} {'ms':>8} {'TFLOP/s':>8} {'cuDNN ms':>8} {'TFLOP/s':>8} {'speedup':>7}"
    )
    for shape, default_ms, best, best_ms, cudnn_ms in rows:
        flops = conv_flops(*shape)
        print(
            " ".join(f"{v:>{n}d}" for v, n in zip(shape, (4, 4, 3, 3, 4, 2, 2, 2, 2)))
            + f" {default_ms:10.3f} {str(best):>24} {best_ms:8.3f} {flops / best_ms / 1e9:8.1f} "
            f"{cudnn_ms:8.3f} {flops / cudnn_ms / 1e9:8.1f} {cudnn_ms / best_ms:7.3f}"
        )


if __name__ == "__main__":
    main()
