"""`lower()`: the whole pass pipeline, as one ordered list.

Each line is one pass and says why it runs where it does. Passes that have options take the one
`CompileOptions` of the compile as their second argument. `TILELANG_DUMP_IR=<folder>` (or the pass
config `tl.dump_ir`) writes the IR after every pass, numbered in pipeline order.
"""

from __future__ import annotations

import functools
import importlib
import logging
import os
from dataclasses import dataclass

import tvm
from tvm import tirx

from tilelang.errors import CompilerError, UserError
from tilelang.options import CompileOptions
from tilelang.transform.align_shared_tiles import align_shared_tiles
from tilelang.transform.apply_global_layouts import apply_global_layouts
from tilelang.transform.check_cpu_constructs import check_cpu_constructs
from tilelang.transform.check_descriptor_alignment import check_descriptor_alignment
from tilelang.transform.check_hopper_primitives import check_hopper_primitives
from tilelang.transform.check_register_budget import check_register_budget
from tilelang.transform.check_shared_memory import SharedMemoryOverLimit, check_shared_memory, user_shared_tiles
from tilelang.transform.choose_rasterization import choose_rasterization
from tilelang.transform.collect_register_hints import collect_register_hints
from tilelang.transform.common import collect
from tilelang.transform.consumer_barriers import consumer_barriers
from tilelang.transform.drop_repeated_barriers import drop_repeated_barriers
from tilelang.transform.expand_elementwise_ops import expand_elementwise_ops
from tilelang.transform.expose_dynamic_multiples import expose_dynamic_multiples
from tilelang.transform.fold_accumulator_clear import fold_accumulator_clear
from tilelang.transform.fold_tile_extents import fold_tile_extents
from tilelang.transform.hoist_allocations import hoist_allocations
from tilelang.transform.hoist_loop_barriers import hoist_loop_barriers
from tilelang.transform.hoist_shared_reads import hoist_shared_reads
from tilelang.transform.infer_layout import infer_layout
from tilelang.transform.inject_cp_async_pipelines import inject_cp_async_pipelines
from tilelang.transform.inject_tma_pipelines import inject_tma_pipelines
from tilelang.transform.keep_nan_checks import keep_nan_checks
from tilelang.transform.legalize_safe_memory_access import legalize_safe_memory_access
from tilelang.transform.lower_blocks_for_cpu import lower_blocks_for_cpu
from tilelang.transform.lower_tile_ops import lower_tile_ops
from tilelang.transform.lower_tile_ops_for_cpu import lower_tile_ops_for_cpu
from tilelang.transform.lower_tma_copies import lower_tma_copies
from tilelang.transform.merge_shared_tiles import merge_shared_tiles
from tilelang.transform.pack_fp4_tensors import pack_fp4_tensors
from tilelang.transform.place_wgmma_waits import place_wgmma_waits
from tilelang.transform.plan_pipelines import plan_pipelines
from tilelang.transform.raise_copy_loops import raise_copy_loops
from tilelang.transform.rasterize_blocks import rasterize_blocks
from tilelang.transform.relax_role_barriers import relax_role_barriers
from tilelang.transform.retype_access_ptrs import retype_access_ptrs
from tilelang.transform.select_gemm_instructions import select_gemm_instructions
from tilelang.transform.set_register_budgets import set_register_budgets
from tilelang.transform.specialize_uniform_masks import specialize_uniform_masks
from tilelang.transform.stage_fragment_stores import stage_fragment_stores
from tilelang.transform.sync_shared_atomics import expose_shared_atomics, restore_shared_atomics
from tilelang.transform.sync_thread_branches import expose_thread_branches, restore_thread_branches, thread_sync
from tilelang.transform.use_fast_exp2 import use_fast_exp2
from tilelang.transform.warp_specialize import CONSUMER_BRANCH, warp_specialize
from tilelang.transform.widen_large_indices import widen_large_indices
from tilelang.utils.target import has_tma, is_cpu

logger = logging.getLogger("tilelang")
_build_utils = importlib.import_module("tvm.tirx.build")  # the module, not the function tvm.tirx.build


def _tile_passes(options: CompileOptions, target):
    """Our passes, on PrimFuncs that still have tile ops, parallel loops and fragments."""

    def opt(fn):  # a pass that takes the options
        return functools.partial(fn, options=options)

    hopper = has_tma(target)  # TMA, mbarrier pipelines, warp specialization, setmaxnreg (sm_90a)
    return [
        # The hand-written warp-specialization primitives off sm_90a: an error before anything else.
        *([] if hopper else [("check_hopper_primitives", check_hopper_primitives)]),
        # `x != x` (a NaN test) before any simplification would fold it to False.
        ("keep_nan_checks", keep_nan_checks),
        # Tile extents between bound values (`Q[b, H0:H1, :]`) become the constants they are, before
        # any pass reads a tile's shape (TMA boxes, pipelines, gemm plans); the user's T.tma_copy is
        # checked with them.
        ("fold_tile_extents", fold_tile_extents),
        # Tiles allocated inside loop bodies become one allocation in front of the loop, before any
        # pass restructures loops (a pipeline's prologue copies need the tile defined before it).
        ("hoist_allocations", hoist_allocations),
        # A T.Parallel loop in a pipelined loop that only copies a global tile into a shared one is
        # that T.copy, for the planners below (TMA, pipelines) to issue it ahead like the user's copies.
        ("raise_copy_loops", raise_copy_loops),
        # Register hints (T.annotate_*_reg_*, T.no_set_max_nreg) are for the whole kernel: out of
        # the body before any pass moves code around them, kept for set_register_budgets.
        ("collect_register_hints", collect_register_hints),
        # The warpgroups' T.set_max_nreg counts against the registers the block has, while the
        # thread branches they sit in are as the user wrote them.
        ("check_register_budget", check_register_budget),
        # Each T.gemm's instruction (mma.sync or wgmma) and plan, decided once from the threads of
        # its scope and recorded on the call: the pipeline planner, layout inference and lowering read it.
        ("select_gemm_instructions", opt(select_gemm_instructions)),
        # A GEMM-shaped kernel without T.use_swizzle gets block panels for L2 reuse (logged), while
        # its copies are still T.copy; rasterize_blocks applies it after the pipelines.
        ("choose_rasterization", choose_rasterization),
        # Copies to shared memory that run once per kernel become TMA loads; the pipeline planner
        # then knows which tiles only TMA writes (no proxy fence before wgmma).
        *([("lower_tma_copies", opt(lower_tma_copies))] if hopper else []),
        # The software pipelines, on tile ops (copy regions are explicit), before any pass looks at
        # the shapes of the tiles they multi-buffer. First each T.Pipelined loop's form (cp.async,
        # TMA, TMA with a producer warpgroup, 2-block clusters), recorded on the loop, then each form
        # built: a warp-specialized loop's consumers with their stages and stage releases marked.
        ("plan_pipelines", opt(plan_pipelines)),
        ("inject_cp_async_pipelines", opt(inject_cp_async_pipelines)),
        *([("inject_tma_pipelines", opt(inject_tma_pipelines))] if hopper else []),
        # The consumers' wgmma gemms run asynchronously: each statement waits for the gemms it
        # depends on and a stage is freed once its gemms are done (or one iteration late). On the
        # consumer loop as built, while gemms are tile ops and the regions they touch explicit;
        # before layout inference, which lays out the fragments the waits fence.
        *([("place_wgmma_waits", place_wgmma_waits)] if hopper else []),
        # Block-index remapping after the pipelines, whose 2-block clusters pair blocks by their
        # plain indices (blocks one index apart); the remap then keeps each pair together.
        ("rasterize_blocks", rasterize_blocks),
        # Masks that are uniform over a tile (attention blocks off the diagonal) become plain fills,
        # then zeroing right before a gemm becomes the gemm's clear flag. After pipelining, so the
        # user's statement numbering (T.Pipelined order/stage/group) is intact for the planner.
        ("specialize_uniform_masks", specialize_uniform_masks),
        ("fold_accumulator_clear", fold_accumulator_clear),
        # A fragment stored to global memory goes through a shared tile when there is room: after
        # pipelining (stage buffers count with their stages), while copies are still tile ops.
        *([("stage_fragment_stores", opt(stage_fragment_stores))] if hopper else []),
        # copy/fill become T.Parallel loops, so layout inference sees one kind of element-wise work.
        ("expand_elementwise_ops", expand_elementwise_ops),
        # Global accesses past the tensor's edge get guards while indices are still logical,
        # so the vector plan below can check that each guard is uniform per vector.
        ("legalize_safe_memory_access", legalize_safe_memory_access),
        # Global tensors with a layout (T.annotate_layout) are indexed through it: after the guards,
        # which compare logical indices; before the vector plan, which must see physical offsets.
        ("apply_global_layouts", apply_global_layouts),
        # Loop and fragment layouts: which thread runs which iteration, vector width per loop.
        ("infer_layout", opt(infer_layout)),
        # Parallel loops and tile ops become per-thread code; fragments become register arrays,
        # annotated shared tiles are re-indexed through their layout.
        ("lower_tile_ops", opt(lower_tile_ops)),
        # A warp-specialized loop gets its producer warpgroup: threads split into the two roles
        # (before any simplification that knows the old thread count); then each role its
        # registers (setmaxnreg), the producer giving back what the consumers take.
        *([("warp_specialize", warp_specialize), ("set_register_budgets", set_register_budgets)] if hopper else []),
        # Tiles and tensors of fp4 become bytes (tiles a value per byte, tensors two, as torch stores
        # them), once loops are per-thread with their vector widths; TVM's passes see only bytes.
        ("pack_fp4_tensors", pack_fp4_tensors),
    ]


def _tvm_passes(options: CompileOptions, target):
    """TVM's lowering passes, once the IR is plain per-thread TIR."""
    hopper = has_tma(target)
    syncs = not options.disable_thread_storage_sync  # tl.disable_thread_storage_sync: the kernel's own only
    return [
        ("stmt_simplify", tirx.transform.StmtSimplify()),
        # Tensors of 2**31 elements or more: offsets in int64 (int32 ones would wrap).
        ("widen_large_indices", _apply_to_funcs(widen_large_indices)),
        # Buffers become flat pointers; the vectorized loops then become 128-bit accesses.
        ("flatten_buffer", tirx.transform.FlattenBuffer()),
        ("narrow_data_type", tirx.transform.NarrowDataType(32)),
        ("vectorize_loop", tirx.transform.VectorizeLoop(not options.disable_vectorize)),
        # T.exp2 on the special function unit (ex2.approx), unless the user asked for exp2f. After
        # vectorization (which would leave a loop of calls serial): a vector's exps become one call
        # per lane in the generated code.
        *([] if options.precise_exp2 else [("use_fast_exp2", _apply_to_funcs(use_fast_exp2))]),
        ("storage_rewrite", tirx.transform.StorageRewrite()),
        # StorageRewrite lets tiles of different element types share an allocation but points a
        # tile's tvm_access_ptr at the shared one, of the other type: each gets a view of its own.
        ("retype_access_ptrs", _apply_to_funcs(retype_access_ptrs)),
        ("unroll_loop", tirx.transform.UnrollLoop()),
        ("stmt_simplify_2", tirx.transform.StmtSimplify()),
        # Dynamic sizes that a vector branch checked to be multiples of its width, written so that
        # the code generator sees it: after the last simplification, which would undo it.
        ("expose_dynamic_multiples", _apply_to_funcs(expose_dynamic_multiples)),
        ("remove_no_op", tirx.transform.RemoveNoOp()),
        ("verify_memory", tirx.transform.VerifyMemory()),
        ("annotate_entry_func", tirx.transform.AnnotateEntryFunc()),
        # Hopper: each tile a whole number of 1024-byte blocks, so packing keeps TMA destinations
        # and swizzled wgmma operands aligned.
        *([("align_shared_tiles", _apply_to_funcs(align_shared_tiles))] if hopper else []),
        # Barriers go in while each tile is a buffer of its own: TVM's barrier insertion then sees that
        # a loop reading one tile and writing another has no conflict across its iterations.
        # Reads of shared memory in an `if` condition or a loop bound, which TVM's barrier
        # insertion does not expect, are bound just before their statement.
        *([("hoist_shared_reads", _apply_to_funcs(hoist_shared_reads))] if syncs else []),
        # Branches of the first n threads: barriers around them, their condition hidden from TVM's
        # barrier insertion and put back after it, with the barriers inside over the n threads.
        ("expose_thread_branches", _apply_to_funcs(functools.partial(expose_thread_branches, options=options))),
        # Without tl.disable_thread_storage_sync (then no barrier is inserted, as in TileLang):
        *(
            [
                # Warp roles written by hand that synchronize through mbarriers run side by side: no
                # block barrier between them (they touch shared memory only through TMA, wgmma, mbarriers).
                ("relax_role_barriers", _apply_to_funcs(relax_role_barriers)),
                # Atomics on shared memory as reads and writes for it (TVM does not look inside their pointers).
                ("expose_shared_atomics", _apply_to_funcs(expose_shared_atomics)),
                ("thread_sync_shared", thread_sync("shared")),
                ("thread_sync_shared_dyn", thread_sync("shared.dyn")),
                ("restore_shared_atomics", _apply_to_funcs(restore_shared_atomics)),
                # A barrier TVM put first in a loop that carries nothing through shared memory goes
                # before the loop: once, not once per iteration.
                ("hoist_loop_barriers", _apply_to_funcs(hoist_loop_barriers)),
            ]
            if syncs
            else []
        ),
        ("restore_thread_branches", _apply_to_funcs(restore_thread_branches)),
        # One dynamic shared-memory block per kernel (the launcher raises the limit past 48 KB): tiles
        # whose lifetimes do not overlap share bytes, with a block barrier between the old tile's last
        # use and the new one's first where there is none yet.
        ("merge_shared_tiles", _apply_to_funcs(merge_shared_tiles)),
        # Two block barriers side by side (one per shared scope's insertion, or merge_shared_tiles'
        # next to TVM's) are one.
        ("drop_repeated_barriers", _apply_to_funcs(drop_repeated_barriers)),
        # Barriers inside a warp-specialized kernel's consumer branch wait for the consumers only.
        ("consumer_barriers", consumer_barriers()),
        # Each T.Kernel becomes a __global__ function; the host function launches them in order.
        ("split_host_device", tirx.transform.SplitHostDevice()),
        # The host entry checks every tensor argument (dtype, shape, strides, device).
        ("make_packed_api", tirx.transform.MakePackedAPI()),
        ("fp8_storage_legalize", tirx.transform.FP8StorageLegalize()),
        ("bf16_storage_legalize", tirx.transform.BF16StorageLegalize()),
    ]


def _cpu_passes(options: CompileOptions):
    """The CPU target (`target="cpu"`): a block runs on one core and its tile ops as loops over whole
    tiles; `tvm.compile` then does TVM's own lowering and LLVM (`codegen/cpu.py`)."""
    return [
        # The block's threads do not exist on the CPU: what names them, or a GPU instruction, is an
        # error at the user's line before anything else (as for the Hopper primitives off sm_90a).
        ("check_cpu_constructs", check_cpu_constructs),
        ("keep_nan_checks", keep_nan_checks),
        ("fold_tile_extents", fold_tile_extents),
        # copy/fill/tile atomics become T.Parallel loops, then global accesses past a tensor's edge
        # get their guards, while indices are logical: as on the GPU, partial tiles are predicated.
        ("expand_elementwise_ops", expand_elementwise_ops),
        ("legalize_safe_memory_access", legalize_safe_memory_access),
        # gemm, reductions, cumsum: loops over whole tiles (each op's `lower_cpu`).
        ("lower_tile_ops_for_cpu", lower_tile_ops_for_cpu),
        # Blocks a parallel loop over the cores, T.Parallel/T.Pipelined plain loops, tiles local arrays.
        ("lower_blocks_for_cpu", lower_blocks_for_cpu),
    ]


def _apply_to_funcs(fn):
    """Run a PrimFunc -> PrimFunc pass on every function of a module, in Python: an exception it
    raises (a UserError pointing at the kernel) reaches the caller with its type intact."""

    def _pass(mod):
        return tvm.IRModule({gv: fn(f) for gv, f in mod.functions.items()}, attrs=mod.attrs)

    return _pass


@dataclass
class Lowered:
    """The result of lowering: the host and device IR modules, ready for codegen."""

    host_mod: tvm.IRModule
    device_mod: tvm.IRModule
    target: object


def lower(func: tirx.PrimFunc, target, options: CompileOptions | None = None, name: str = "main") -> Lowered:
    """Run the pipeline on one kernel function for `target` (a tvm Target with host cuda_host)."""
    options = options if options is not None else CompileOptions()
    if is_cpu(target):
        return _lower_cpu(func, target, options, name)
    # Over the shared-memory limit, first without a staged epilogue tile (an optimization that
    # counted on the merge reusing dead tiles' bytes), then without warp specialization. The
    # planners decide tile by tile without a whole-kernel byte count, and the merge that decides
    # the real total runs last; retrying is cheaper than predicting it (about 0.1 s a retry).
    attempts = [options] + (
        [options.replace(disable_fragment_store_staging=True)] if not options.disable_fragment_store_staging else []
    )
    for k, attempt in enumerate(attempts):
        try:
            return _lower(func, target, attempt, name)
        except SharedMemoryOverLimit as err:
            if k + 1 < len(attempts):
                continue
            # A warp-specialized kernel keeps every tile of its consumer branch live at once (the merge
            # cannot reuse bytes across the producer/consumer split); without it the tiles may fit.
            if attempt.disable_warp_specialized or not err.warp_specialized:
                raise
            logger.debug("kernel '%s': over the shared-memory limit when warp-specialized; compiling without", name)
            return _lower(func, target, attempt.replace(disable_warp_specialized=True), name)


def _is_warp_specialized(mod) -> bool:
    return any(a.attr_key == CONSUMER_BRANCH for f in mod.functions.values() for a in collect(f.body, tirx.AttrStmt))


def _lower(func: tirx.PrimFunc, target, options: CompileOptions, name: str) -> Lowered:
    dump_dir = options.dump_ir
    mod = tvm.IRModule({name: func.with_attr("global_symbol", name)})
    mod = tirx.transform.BindTarget(target)(mod)
    tiles = user_shared_tiles(func)
    steps = [(n, _apply_to_funcs(f)) for n, f in _tile_passes(options, target)] + _tvm_passes(options, target)
    with tvm.transform.PassContext(opt_level=3, config=options.tvm_pass_config()):
        for k, (pass_name, p) in enumerate(steps):
            mod = _run_pass(pass_name, p, mod, dump_dir)
            if dump_dir:
                _dump(dump_dir, k, pass_name, mod)
            if pass_name == "merge_shared_tiles":
                # The merged block is each kernel's real shared-memory need: check it against the target;
                # the descriptor check reads the gemm pointers with their tiles' offsets in the block.
                try:
                    check_shared_memory(mod, target, tiles)
                except SharedMemoryOverLimit as err:
                    err.warp_specialized = _is_warp_specialized(mod)  # `lower` may retry without the split
                    raise
                check_descriptor_alignment(mod)
        host_mod, device_mods = _build_utils.split_host_device_mods(mod)
        host_mod = tvm.s_tir.pipeline.finalize_host_passes()(host_mod)
        ((_, device_mod),) = device_mods.items()
        device_mod = tvm.s_tir.pipeline.finalize_device_passes()(device_mod)
    if options.check_barrier_protocol:
        # Debug only: every mbarrier kernel run on the CPU, warp by warp (tilelang/analysis).
        from tilelang.analysis import check_barrier_protocol

        check_barrier_protocol(device_mod)
    return Lowered(host_mod, device_mod, target)


def _lower_cpu(func: tirx.PrimFunc, target, options: CompileOptions, name: str) -> Lowered:
    """The CPU branch: one module of plain loops (`host_mod`), compiled by `codegen/cpu.py`."""
    mod = tvm.IRModule({name: func.with_attr("global_symbol", name)})
    mod = tirx.transform.BindTarget(target)(mod)
    for k, (pass_name, fn) in enumerate(_cpu_passes(options)):
        mod = _run_pass(pass_name, _apply_to_funcs(fn), mod, options.dump_ir)
        if options.dump_ir:
            _dump(options.dump_ir, k, pass_name, mod)
    return Lowered(mod, None, target)


def _run_pass(name: str, p, mod, dump_dir):
    """Run one pass. A mistake in the user's kernel (UserError) reaches the user as it is; any other
    failure is a compiler bug, reported as a CompilerError that names the pass and how to see its input."""
    try:
        return p(mod)
    except UserError:
        raise
    except Exception as err:  # noqa: BLE001 (re-raised as a CompilerError with the pass named)
        where = (
            f"the IR before it is in {dump_dir}"
            if dump_dir
            else "set TILELANG_DUMP_IR=<folder> to see the IR before it"
        )
        raise CompilerError(
            f"tilelang internal error in pass '{name}': {type(err).__name__}: {err}\n"
            f"This is a compiler bug, not a mistake in the kernel; {where}."
        ) from err


def _dump(folder: str, index: int, name: str, mod) -> None:
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, f"{index:02d}_{name}.py"), "w") as f:
        f.write(mod.script())
