"""The device intrinsics' C++ spelling (codegen/templates.py): template parameters in order, flags as
true/false, what the code generator adds around a kernel (cluster dims, the wgmma instructions),
and the named-barrier ids the templates use agreeing with transform/barrier_ids.py."""

import os
import re

import tvm
from tvm import tirx

import tilelang
from tilelang import env, intrinsics
from tilelang.codegen import templates, wgmma_isa
from tilelang.transform import barrier_ids


def _kernel(*stmts):
    """A device function `k_kernel` whose body is `stmts`."""
    func = tirx.PrimFunc([], tirx.SeqStmt(list(stmts))).with_attr("global_symbol", "k_kernel")
    return tvm.IRModule({"k_kernel": func})


def test_a_template_is_spelled_with_its_parameters_in_order():
    assert templates.name(intrinsics.NAMED_BARRIER_SYNC, {"threads": 128, "id": 4}) == "tl::named_barrier_sync<4, 128>"
    assert templates.name(intrinsics.CP_ASYNC_WAIT, {"pending": 0}) == "tl::cp_async_wait<0>"
    template = dict(M=64, N=64, K=32, warp_m=2, warp_n=2, trans_a=0, trans_b=1, clear=1, lda=32, ldb=32)
    template.update(swz_a=2, swz_b=0, rows_a=0, rows_b=64)
    assert (
        templates.name(intrinsics.GEMM_SS, template)
        == "tl::gemm_ss<64, 64, 32, 2, 2, false, true, true, 32, 32, 2, 0, 0, 64>"
    )


def test_spell_turns_intrinsics_into_extern_calls_and_reads_the_kernel_facts():
    buf = tirx.decl_buffer((4,), "float32", "x", scope="local")
    tile = tirx.decl_buffer((4,), "bfloat16", "t", scope="shared.dyn")
    a, b, c = (tirx.address_of(tirx.BufferLoad(x, [0])) for x in (tile, tile, buf))
    wgmma = dict(M=128, N=352, K=64, wg_m=1, wg_n=2, trans_a=0, trans_b=1, clear=0, rows_a=128, ld_a=64)
    wgmma.update(swz_a=3, rows_b=352, ld_b=64, swz_b=3, wait=-1, fence=1)
    mod = _kernel(
        intrinsics.CLUSTER_DIMS.stmt({"x": 1, "y": 2, "z": 1}),
        intrinsics.SETMAXNREG_INC.stmt({"registers": 240}),
        intrinsics.WGMMA_SS.stmt(wgmma, a, b, c, 0),
    )
    spelled, kernels = templates.spell(mod)
    names = [str(e.value.args[0].value) for e in spelled["k_kernel"].body.seq]
    assert names == [
        "tl::cluster_dims<1, 2, 1>",
        "tl::setmaxnreg_inc<240>",
        "tl::wgmma_ss<128, 352, 64, 1, 2, false, true, false, 128, 64, 3, 352, 64, 3, -1, true>",
    ]
    facts = kernels["k_kernel"]
    assert facts.cluster_dims == (1, 2, 1)
    assert facts.wgmma_forms == {wgmma_isa.Form(176, "bfloat16", "float32")}  # 352 columns over 2 warpgroups
    assert facts.setmaxnreg == [("inc", 240)]
    assert templates.setmaxnreg_calls("tl::setmaxnreg_inc<240>(); tl::setmaxnreg_dec<24>();") == [
        ("inc", 240),
        ("dec", 24),
    ]


def test_the_users_setmaxnreg_calls_are_marked_with_their_lines():
    facts = templates.Kernel(setmaxnreg=[("inc", 240), ("dec", 24)], setmaxnreg_lines=["/k.py:7", None])
    body = "  tl::setmaxnreg_inc<240>();\n  x = 1;\n  tl::setmaxnreg_dec<24>();\n"
    marked = templates.mark_setmaxnreg_lines(body, facts)
    assert marked == body.replace("<240>();", "<240>();  // T.set_max_nreg at /k.py:7")
    assert templates.mark_setmaxnreg_lines(marked, facts) == marked  # marking twice changes nothing
    assert templates.setmaxnreg_sites(marked) == [("inc", 240, ("/k.py", 7)), ("dec", 24, None)]
    # calls other than the noted ones (a hook rewrote the source): left unmarked
    assert templates.mark_setmaxnreg_lines(body.replace("240", "232"), facts) == body.replace("240", "232")


def test_a_clustered_kernel_gets_cluster_dims_from_its_record():
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "examples", "gemm"))
    import example_gemm as gemm

    func = gemm.matmul.factory(256, 256, 512, 128, 256, 64, "float16", "float", 256, 2)
    k = tilelang.compile(func, out_idx=[-1], target="sm_90a", pass_configs={"tl.enable_tma_multicast": True})
    src = k.get_kernel_source()
    assert 'extern "C" __global__ void __cluster_dims__(1, 2, 1) ' in src
    assert "tl::cluster_dims<1, 2, 1>();" in src


def test_the_pingpong_barrier_ids_of_tma_h_are_the_tables():
    with open(os.path.join(env.template_path(), "tl_templates", "cuda", "tma.h")) as f:
        header = f.read()
    first = int(re.search(r"#define TL_PINGPONG_BARRIER (\d+)", header).group(1))
    assert (first, first + 1) == barrier_ids.PINGPONG
    assert barrier_ids.PINGPONG[1] < barrier_ids.THREAD_BRANCHES[0] and barrier_ids.CONSUMERS < first
