"""The TileOp protocol: every tile op is one registered class the passes find by parsing, and a new
op defined in one module (here, in this test) runs through the whole pipeline without any pass
naming it."""

import pytest
from tvm import tirx

import tilelang
import tilelang.language as T
from tilelang import op as op_package
from tilelang.codegen import cuda
from tilelang.op import base
from tilelang.op.loops import build_parallel_nest
from tilelang.utils.ir import collect


def _kernel():
    @T.prim_func
    def main(A: T.Tensor((128, 64), "float16"), B: T.Tensor((128, 64), "float16"), C: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=128):
            A_s = T.alloc_shared((128, 64), "float16")
            acc = T.alloc_fragment((128, 64), "float32")
            row = T.alloc_fragment((64,), "float32")
            T.copy(A, A_s)
            T.fill(acc, 0)
            T.copy(A_s, acc)
            T.reduce_sum(acc, row, dim=0)
            T.copy(row, C)
            T.atomic_add(B, A_s)

    return main


def test_every_tile_op_call_parses_into_its_class():
    ops = [op for op in map(base.parse, collect(_kernel().body, tirx.Evaluate)) if op is not None]
    names = [type(op).__name__ for op in ops]
    assert names == ["Copy", "Fill", "Copy", "Reduce", "Copy", "AtomicAdd"]
    assert all(op.span is not None for op in ops)
    copy, reduce = ops[0], ops[3]
    assert copy.expands and copy.src.name == "A" and copy.dst.name == "A_s"
    assert not reduce.expands and reduce.infers_layouts() and reduce.fragments() == [reduce.src, reduce.dst]
    assert base.parse(tirx.Evaluate(0)) is None


def test_language_exports_every_op_module_all():
    exported = op_package.user_functions()
    for name in ("copy", "fill", "clear", "gemm", "wait_wgmma", "GemmWarpPolicy", "reduce_max", "cumsum", "atomic_add"):
        assert getattr(T, name) is exported[name]


# A new op, defined here the way a module under tilelang/op/ defines one: `T.scale(src, dst, k)`
# sets dst = src * k, element-wise, expanding to a T.Parallel loop like T.copy.
@base.register
class _Scale(base.TileOp):
    name = "test_scale"
    expands = True

    def __init__(self, call, span=None):
        super().__init__(call, span)
        self.src, self.dst = base.Region.from_ir(call.args[0]), base.Region.from_ir(call.args[1])
        self.k = call.args[2]

    def expand(self, analyzer=None):
        def body(idx, _vars):
            return tirx.BufferStore(self.dst.buffer, tirx.BufferLoad(self.src.buffer, idx) * self.k, idx)

        return build_parallel_nest(self.dst, body, span=self.span)


def scale(src, dst, k):
    s, d = base.to_region_pair(src, dst, "T.scale")
    return base.make_call(_Scale.name, [s.to_ir(), d.to_ir(), tirx.const(k, str(d.buffer.dtype))])


# And one that lowers itself after layout inference, reading its fragment's layout: every thread
# doubles the elements it holds.
@base.register
class _DoubleInPlace(base.TileOp):
    name = "test_double"

    def __init__(self, call, span=None):
        super().__init__(call, span)
        self.buffer = base.Region.from_ir(call.args[0]).buffer

    def fragments(self):
        return [self.buffer]

    def lower(self, ctx):
        local = ctx.local_of(self.buffer)
        r = tirx.Var("r", "int32")
        value = tirx.BufferLoad(local, [r]) * tirx.const(2, str(local.dtype))
        return tirx.For(r, 0, local.shape[0], tirx.ForKind.SERIAL, tirx.BufferStore(local, value, [r]))


def double(buffer):
    return base.make_call(_DoubleInPlace.name, [base.to_region(buffer, "T.double").to_ir()])


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_a_new_op_runs_through_the_pipeline_without_a_pass_naming_it(target):
    @T.prim_func
    def main(A: T.Tensor((256,), "float32"), B: T.Tensor((256,), "float32")):
        with T.Kernel(1, threads=128):
            a = T.alloc_fragment((256,), "float32")
            T.copy(A, a)
            double(a)
            scale(a, B, 3.0)

    kernel = tilelang.compile(main, target=target)
    src = kernel.get_kernel_source()
    assert "a_local_ptr[r] * 0x1p+1f" in src  # doubled in place, in the registers the copy filled
    assert "3.000000e+00" in src
    cuda.compile_object(src, kernel.target)


def test_registering_a_second_class_under_one_name_is_an_error():
    with pytest.raises(RuntimeError, match="registered twice"):

        @base.register
        class _Other(base.TileOp):
            name = "test_scale"
