"""Operator templates that recommend schedules for a device, as the public TileLang's autotuning
examples use them to build their search space:

    from tilelang.carver.arch import CUDA
    from tilelang.carver.template import MatmulTemplate
    template = MatmulTemplate(M=8192, N=8192, K=8192, in_dtype="float16", out_dtype="float16",
                              accum_dtype="float32").with_arch(CUDA("cuda"))
    template.equivalent_function()          # the computation, as a TIR PrimFunc
    for hint in template.recommend_hints(topk=20):
        block_m, block_n = hint.block; block_k = hint.rstep[0]; stages = hint.pipeline_stage ...

Without a GPU, `CUDA.from_arch("sm_90a", sm_count=132)` describes one. The hints come from
`roller/matmul_tiles.py` (the ranking rules are in its docstring). Nothing here compiles a kernel.
"""

from __future__ import annotations

from dataclasses import dataclass

from tilelang.carver.arch import TileDevice, is_cuda_arch
from tilelang.carver.roller.hint import Hint
from tilelang.carver.roller.matmul_tiles import matmul_hints
from tilelang.errors import UserError

__all__ = ["BaseTemplate", "MatmulTemplate"]


class BaseTemplate:
    """A computation of fixed shapes that recommends schedules for a device.

    Subclasses are dataclasses of the computation's parameters; they define `check` (the parameters'
    errors), `initialize_function` (the computation as a PrimFunc) and `get_hardware_aware_configs`
    (the hints for a device)."""

    _arch: TileDevice | None = None
    _func = None

    def __post_init__(self):
        self.check()

    def check(self) -> None:
        """Raises: UserError for parameters the template cannot describe."""

    def with_arch(self, arch: TileDevice) -> BaseTemplate:
        """Set the device the hints are for; returns the template.

        Raises: UserError when `arch` is not a device description (e.g. a target string)."""
        if not isinstance(arch, TileDevice):
            raise UserError(
                f"{type(self).__name__}.with_arch: expected a device such as CUDA('cuda') or "
                f"CUDA.from_arch('sm_90a', sm_count=132), got {arch!r}"
            )
        self._arch = arch
        return self

    def has_arch(self) -> bool:
        return self._arch is not None

    @property
    def arch(self) -> TileDevice | None:
        return self._arch

    def initialize_function(self):
        raise NotImplementedError(f"{type(self).__name__} defines no equivalent function")

    def equivalent_function(self):
        """The computation the hints schedule, as a TIR PrimFunc (built on first use)."""
        if self._func is None:
            self._func = self.initialize_function()
        return self._func

    def get_hardware_aware_configs(self, arch: TileDevice, topk: int = 10) -> list[Hint]:
        raise NotImplementedError(f"{type(self).__name__} recommends no hints")

    def recommend_hints(self, topk: int = 10) -> list[Hint]:
        """The `topk` best schedules on the template's device, best first.

        Raises: UserError when no device was set with `with_arch`."""
        if self._arch is None:
            raise UserError(
                f"{type(self).__name__}.recommend_hints: no arch is set; call .with_arch(CUDA('cuda')) first "
                f"(or .with_arch(CUDA.from_arch('sm_90a', sm_count=132)) to plan for a GPU this machine lacks)"
            )
        return self.get_hardware_aware_configs(self._arch, topk)


@dataclass(repr=False)
class MatmulTemplate(BaseTemplate):
    """C = A @ B on tensor cores: A is (M, K) ((K, M) with trans_A), B is (N, K) with trans_B (the
    default, as the public TileLang's) or (K, N) without; C is (M, N) in out_dtype, accumulated in
    accum_dtype, plus a bias of N values in accum_dtype with with_bias.

    Raises: UserError when M, N or K is not a positive int."""

    M: int = None
    N: int = None
    K: int = None
    trans_A: bool = False  # noqa: N815  (the public TileLang's field names)
    trans_B: bool = True  # noqa: N815
    in_dtype: str = "float16"
    out_dtype: str = "float16"
    accum_dtype: str = "float16"
    with_bias: bool = False

    def check(self) -> None:
        for name in ("M", "N", "K"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise UserError(f"MatmulTemplate: {name} must be a positive int, got {value!r}")
        # T.float16 and friends are tilelang dtypes; keep their names, as the PrimFunc and hints want.
        self.in_dtype, self.out_dtype, self.accum_dtype = map(str, (self.in_dtype, self.out_dtype, self.accum_dtype))

    def initialize_function(self):
        from tvm import te

        M, N, K = self.M, self.N, self.K
        A = te.placeholder((K, M) if self.trans_A else (M, K), name="A", dtype=self.in_dtype)
        B = te.placeholder((N, K) if self.trans_B else (K, N), name="B", dtype=self.in_dtype)
        bias = te.placeholder((N,), name="Bias", dtype=self.accum_dtype)
        k = te.reduce_axis((0, K), name="k")

        def product(i, j):
            a = A[k, i] if self.trans_A else A[i, k]
            b = B[j, k] if self.trans_B else B[k, j]
            return te.sum(a.astype(self.accum_dtype) * b.astype(self.accum_dtype), axis=k)

        cast = self.out_dtype != self.accum_dtype
        # The output parameter is C whichever step computes it last.
        C = te.compute((M, N), product, name="C" if not (self.with_bias or cast) else "C_accum")
        if self.with_bias:
            C = te.compute((M, N), lambda i, j: C[i, j] + bias[j], name="C_bias" if cast else "C")
        if cast:
            C = te.compute((M, N), lambda i, j: C[i, j].astype(self.out_dtype), name="C")
        return te.create_prim_func([A, B, bias, C] if self.with_bias else [A, B, C])

    def get_hardware_aware_configs(self, arch: TileDevice, topk: int = 10) -> list[Hint]:
        if not is_cuda_arch(arch):
            raise UserError(f"MatmulTemplate.recommend_hints: {arch!r} is not a CUDA device (CUDA only)")
        # Transposes change which operand rows are contiguous, not the tile arithmetic ranked here.
        return matmul_hints(self.M, self.N, self.K, self.in_dtype, self.accum_dtype, self.out_dtype, arch, topk)

    def __repr__(self) -> str:
        fields = ", ".join(
            f"{name}={getattr(self, name)!r}"
            for name in ("M", "N", "K", "trans_A", "trans_B", "in_dtype", "out_dtype", "accum_dtype", "with_bias")
        )
        return f"MatmulTemplate({fields})"
