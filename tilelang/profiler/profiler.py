"""`Profiler`: check a compiled kernel against a reference on random inputs, and time it.

Made by `kernel.get_profiler(tensor_supply_type)`. It works from the kernel's parameter list
(`kernel.params`, `kernel.out_idx`), so it serves a JITKernel and a kernel loaded with
`tilelang.load_library` alike:

    profiler = kernel.get_profiler(tilelang.TensorSupplyType.Randn)
    profiler.assert_allclose(lambda A, B: A @ B, rtol=1e-2, atol=1e-2)
    print(profiler.do_bench(), "ms")                  # the kernel
    print(profiler.do_bench(lambda A, B: A @ B), "ms")  # a reference, on the same inputs
"""

from __future__ import annotations

from tilelang.errors import UserError
from tilelang.profiler import bench
from tilelang.profiler.tensor_supply import TensorSupplyType, supply_tensor


class Profiler:
    """Random inputs, correctness checks and a timer for one kernel.

    Args:
        kernel: a callable kernel with `params` (name, shape, dtype each), `out_idx` and `name`.
        tensor_supply_type: how inputs are drawn (see `TensorSupplyType`).
        device: where inputs are allocated and the kernel is timed: the kernel's own device
            ("cuda", or "cpu" for the CPU target) unless given.
    """

    def __init__(self, kernel, tensor_supply_type=TensorSupplyType.Auto, device=None):
        self.kernel = kernel
        self.supply_type = TensorSupplyType(tensor_supply_type)
        self.device = device or getattr(kernel, "device_type", "cuda")
        self._bench_inputs = None

    @property
    def func(self):
        """The kernel itself (public TileLang's name): `profiler.do_bench(profiler.func)`."""
        return self.kernel

    def __call__(self, *args, **kwargs):
        return self.kernel(*args, **kwargs)

    @property
    def params(self) -> list:
        """Every parameter of the kernel, outputs included."""
        return list(self.kernel.params)

    @property
    def result_idx(self) -> list[int]:
        """The positions of the parameters the kernel allocates and returns."""
        return list(self.kernel.out_idx)

    @property
    def input_params(self) -> list:
        """The parameters the caller passes (those not allocated by the kernel), in call order."""
        return self._get_params()

    def _get_params(self, with_output: bool = False) -> list:
        """The input parameters (and the outputs too with `with_output`), in parameter order.
        Public TileLang's name: a `supply_prog` receives this list."""
        return [p for k, p in enumerate(self.kernel.params) if with_output or k not in self.kernel.out_idx]

    def _get_inputs(self, with_output: bool = False, dynamic_symbolic_constraints: dict | None = None) -> list:
        """Fresh tensors for `_get_params(with_output)`, sized by `dynamic_symbolic_constraints`
        where a dimension is dynamic (public TileLang's name)."""
        sizes = dynamic_symbolic_constraints
        return [supply_tensor(p, self.supply_type, self.device, sizes) for p in self._get_params(with_output)]

    def get_inputs(self) -> list:
        """Freshly drawn tensors for the kernel's inputs, in call order."""
        return self._get_inputs()

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
                tuple/list in the order of `out_idx`). An expected output that is None is not
                compared (as in public TileLang, for outputs the reference cannot give).
            atol, rtol: as in `torch.isclose`.
            max_mismatched_ratio: the fraction of elements per output allowed outside the
                tolerance (public TileLang's default, for rounding-order outliers in low precision).
        """
        inputs, expected, got = self._run_both(reference_program, input_tensors, "assert_allclose")
        names = [self.kernel.params[k].name for k in self.kernel.out_idx]
        if len(expected) != len(got):
            raise AssertionError(
                f"{self.kernel.name} returns {len(got)} outputs ({', '.join(names)}), "
                f"the reference returned {len(expected)}"
            )
        for name, g, e in zip(names, got, expected):
            if e is not None:
                check_close(f"{self.kernel.name}: output '{name}'", g, e, rtol, atol, max_mismatched_ratio)

    def manual_assert_close(self, reference_program, input_tensors=None, manual_check_prog=None) -> None:
        """Run the kernel and `reference_program` on the same inputs, then let
        `manual_check_prog(outputs, expected)` judge (two lists; it raises to reject)."""
        if manual_check_prog is None:
            raise UserError("manual_assert_close needs manual_check_prog(outputs, expected), which raises to reject")
        _, expected, got = self._run_both(reference_program, input_tensors, "manual_assert_close")
        if len(expected) != len(got):
            raise AssertionError(
                f"{self.kernel.name} returns {len(got)} outputs, the reference returned {len(expected)}"
            )
        manual_check_prog(got, expected)

    def assert_consistent(self, repeat: int = 10) -> None:
        """Raise AssertionError unless `repeat` more runs on the same inputs give exactly the first
        run's outputs (a race between threads usually shows up as a difference)."""
        import torch

        inputs = self.get_inputs()
        first = _as_list(self.kernel(*inputs))
        for run in range(repeat):
            for k, (a, b) in enumerate(zip(_as_list(self.kernel(*inputs)), first)):
                if not torch.equal(a, b):
                    n_bad = int((a != b).sum())
                    raise AssertionError(
                        f"{self.kernel.name}: output #{k} of run {run + 2} differs from the first run's in "
                        f"{n_bad} of {a.numel()} elements on the same inputs"
                    )

    def _run_both(self, reference_program, input_tensors, what: str):
        if not self.kernel.out_idx:
            raise UserError(
                f"{self.kernel.name}: {what} compares the outputs the kernel allocates, "
                "and this kernel has none; compile it with out_idx=[...]"
            )
        inputs = list(input_tensors) if input_tensors is not None else self.get_inputs()
        # The reference first: whatever the kernel might write by mistake into its inputs, the
        # expected values are already computed from the original ones.
        expected = _as_list(reference_program(*inputs))
        got = _as_list(self.kernel(*inputs))
        return inputs, expected, got

    def do_bench(
        self,
        func=None,
        warmup: float = 25,
        rep: float = 100,
        n_warmup: int = 0,
        n_repeat: int = 0,
        input_tensors=None,
        backend: str = "event",
        quantiles: list[float] | None = None,
        return_mode: str = "mean",
        dynamic_symbolic_constraints: dict | None = None,
        device=None,
        early_stop_baseline: float | None = None,
    ):
        """Time `func(*inputs)` (default: the kernel) on the GPU; see `tilelang.profiler.do_bench`
        for `warmup`/`rep` (milliseconds), `n_warmup`/`n_repeat` (run counts, when positive),
        `backend`, `quantiles`, `return_mode`, `device` and `early_stop_baseline`.

        The inputs are `input_tensors`, or drawn once per profiler and reused, so timing the kernel
        and a reference with the same profiler compares them on the same data; with
        `dynamic_symbolic_constraints` ({"m": 2048}) they are drawn at those sizes, and with `device`
        on that device.
        """
        with bench._device_scope(device):
            if input_tensors is not None:
                inputs = list(input_tensors)
            elif dynamic_symbolic_constraints is not None or device is not None:
                inputs = self._get_inputs(dynamic_symbolic_constraints=dynamic_symbolic_constraints)
            else:
                if self._bench_inputs is None:
                    self._bench_inputs = self.get_inputs()
                inputs = self._bench_inputs
            fn = func or self.kernel
            return bench.do_bench(
                lambda: fn(*inputs),
                warmup=warmup,
                rep=rep,
                _n_warmup=n_warmup,
                _n_repeat=n_repeat,
                quantiles=quantiles,
                backend=backend,
                return_mode=return_mode,
                device=device if device is not None else self.device,
                early_stop_baseline=early_stop_baseline,
            )


def _as_list(outputs) -> list:
    if outputs is None:
        return []
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
