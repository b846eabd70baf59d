"""`Profiler`: check a compiled kernel against a reference on random inputs, and time it.

Made by `kernel.get_profiler(tensor_supply_type)`. It works from the kernel's parameter list
(`kernel.params`, `kernel.out_idx`), so it serves a JITKernel and a kernel loaded with
`tilelang.load_library` alike:

    profiler = kernel.get_profiler(tilelang.TensorSupplyType.Randn)
    profiler.assert_allclose(lambda A, B: A @ B, rtol=1e-2, atol=1e-2)
    print(profiler.do_bench(), "ms")
"""

from __future__ import annotations

from tilelang.profiler.bench import do_bench
from tilelang.profiler.tensor_supply import TensorSupplyType, supply_tensor


class Profiler:
    """Random inputs, a correctness check and a timer for one kernel.

    Args:
        kernel: a callable kernel with `params` (name, shape, dtype each), `out_idx` and `name`.
        tensor_supply_type: how inputs are drawn (see `TensorSupplyType`).
        device: where inputs are allocated; "cuda" for real kernels (tests use "cpu").
    """

    def __init__(self, kernel, tensor_supply_type=TensorSupplyType.Auto, device="cuda"):
        self.kernel = kernel
        self.supply_type = TensorSupplyType(tensor_supply_type)
        self.device = device
        self._bench_inputs = None

    @property
    def input_params(self) -> list:
        """The parameters the caller passes (those not allocated by the kernel), in call order."""
        return [p for k, p in enumerate(self.kernel.params) if k not in self.kernel.out_idx]

    def get_inputs(self) -> list:
        """Freshly drawn tensors for the kernel's inputs, in call order."""
        return [supply_tensor(p, self.supply_type, self.device) for p in self.input_params]

    def run_once(self, func=None):
        """Call `func` (default: the kernel) once on fresh inputs and return what it returns."""
        return (func or self.kernel)(*self.get_inputs())

    def assert_allclose(
        self, reference_program, input_tensors=None, atol=1e-2, rtol=1e-2, max_mismatched_ratio=0.01
    ) -> None:
        """Raise AssertionError unless the kernel's outputs match `reference_program`'s.

        Both run on the same inputs: `input_tensors` if given, else freshly drawn ones. Fresh
        inputs matter: an output buffer recycled by torch's allocator may still hold a correct
        result from an earlier call, and a kernel that writes nothing would pass on it.

        Args:
            reference_program: takes the inputs, returns the expected outputs (one tensor, or a
                tuple/list in the order of `out_idx`).
            atol, rtol: as in `torch.isclose`.
            max_mismatched_ratio: the fraction of elements per output allowed outside the
                tolerance (public TileLang's default, for rounding-order outliers in low precision).
        """
        if not self.kernel.out_idx:
            raise ValueError(
                f"{self.kernel.name}: assert_allclose compares the outputs the kernel allocates, "
                "and this kernel has none; compile it with out_idx=[...]"
            )
        inputs = list(input_tensors) if input_tensors is not None else self.get_inputs()
        # The reference first: whatever the kernel might write by mistake into its inputs, the
        # expected values are already computed from the original ones.
        expected = _as_list(reference_program(*inputs))
        got = _as_list(self.kernel(*inputs))
        names = [self.kernel.params[k].name for k in self.kernel.out_idx]
        if len(expected) != len(got):
            raise AssertionError(
                f"{self.kernel.name} returns {len(got)} outputs ({', '.join(names)}), "
                f"the reference returned {len(expected)}"
            )
        for name, g, e in zip(names, got, expected):
            check_close(f"{self.kernel.name}: output '{name}'", g, e, rtol, atol, max_mismatched_ratio)

    def do_bench(self, func=None, warmup=25, rep=100, n_warmup=None, n_repeat=None, input_tensors=None) -> float:
        """Median time in milliseconds of `func(*inputs)` (default: the kernel) on the GPU.

        The inputs are drawn once per profiler and reused, so timing the kernel and a reference
        with the same profiler compares them on the same data. `warmup` and `rep` are
        milliseconds; `n_warmup`/`n_repeat` fix the run counts instead (see `tilelang.profiler.do_bench`).
        """
        if input_tensors is not None:
            inputs = list(input_tensors)
        else:
            if self._bench_inputs is None:
                self._bench_inputs = self.get_inputs()
            inputs = self._bench_inputs
        fn = func or self.kernel
        return do_bench(lambda: fn(*inputs), warmup=warmup, rep=rep, n_warmup=n_warmup, n_repeat=n_repeat)


def _as_list(outputs) -> list:
    if isinstance(outputs, (list, tuple)):
        return list(outputs)
    return [outputs]


def check_close(what: str, got, expected, rtol: float, atol: float, max_mismatched_ratio: float = 0.0) -> None:
    """Raise AssertionError naming `what` when `got` and `expected` differ beyond the tolerances.

    Compared in float64 on `got`'s device, whatever the two dtypes (float8 and bool included), so
    a reference computed in float32 checks a float16 kernel directly. NaN matches NaN only.
    """
    import torch

    if not isinstance(got, torch.Tensor):
        raise AssertionError(f"{what}: expected a tensor, got {type(got).__name__}")
    expected = torch.as_tensor(expected, device=got.device)
    if tuple(got.shape) != tuple(expected.shape):
        raise AssertionError(f"{what} has shape {list(got.shape)}, the reference {list(expected.shape)}")
    g, e = got.detach().to(torch.float64), expected.detach().to(torch.float64)
    bad = ~torch.isclose(g, e, rtol=rtol, atol=atol, equal_nan=True)
    n_bad, total = int(bad.sum()), bad.numel()
    if n_bad == 0 or n_bad <= max_mismatched_ratio * total:
        return
    diff = (g - e).abs().nan_to_num(nan=float("inf")).masked_fill(~bad, 0)
    worst = int(diff.flatten().argmax())
    index = tuple(int(i) for i in torch.unravel_index(torch.tensor(worst), tuple(got.shape)))
    raise AssertionError(
        f"{what} differs from the reference in {n_bad} of {total} elements "
        f"({n_bad / total:.2%}; {max_mismatched_ratio:.2%} allowed, rtol={rtol}, atol={atol}); "
        f"worst at index {list(index)}: got {g.flatten()[worst].item()}, expected {e.flatten()[worst].item()}"
    )
