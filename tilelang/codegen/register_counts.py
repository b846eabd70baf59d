"""After ptxas: a kernel's `T.set_max_nreg` calls against the register count it is launched with.

`setmaxnreg.inc` may only raise a warpgroup's count: asked for less than the count the kernel runs
with, the GPU stops the kernel with an illegal instruction. (`setmaxnreg.dec` above the launch count
runs: 64 and 160 in a 384-thread kernel launched with fewer, on the H200; above the launch bound's
cap ptxas refuses it, and transform/check_register_budget.py says so first.) The launch count is
ptxas's choice (the launch bound's cap, 168 for 384 threads, when some warpgroup raises its count
far; less otherwise), known only from its `-v` report, so kernels that call setmaxnreg are assembled
with it and checked here. Seen on the H200: warpgroups at 240 and 160 in a 384-thread kernel that
ptxas launched with 168 registers.
"""

from __future__ import annotations

import re
import warnings

from tilelang.codegen import templates
from tilelang.errors import UserError, format_location

PTXAS_VERBOSE = ["-Xptxas", "-v"]
_ENTRY = re.compile(r"Compiling entry function '(\w+)'")
_USED = re.compile(r"Used (\d+) registers")


def wanted(device_src: str) -> bool:
    """Whether the source (a device unit or a kernel of it) calls setmaxnreg (a unit that does is
    assembled with `PTXAS_VERBOSE`)."""
    return bool(templates.setmaxnreg_calls(device_src))


def launch_counts(ptxas_log: str) -> dict[str, int]:
    """Registers per thread of each kernel, from `ptxas -v`."""
    counts, kernel = {}, None
    for line in ptxas_log.splitlines():
        if m := _ENTRY.search(line):
            kernel = m.group(1)
        elif (m := _USED.search(line)) and kernel is not None:
            counts[kernel] = int(m.group(1))
    return counts


def check(kernel_bodies: dict[str, str], ptxas_log: str) -> None:
    """Raise a UserError for a setmaxnreg.inc below the launch count."""
    if "C7508" in ptxas_log:  # see codegen/cuda.py: _with_one_block_per_sm
        warnings.warn(
            f"ptxas ignored T.set_max_nreg in {', '.join(kernel_bodies)}: it could not tell the register "
            "count the kernel starts with, so every warpgroup runs with the launch count",
            stacklevel=2,
        )
    counts = launch_counts(ptxas_log)
    for kernel, body in kernel_bodies.items():
        if kernel not in counts:
            continue
        launched = (counts[kernel] + 7) // 8 * 8  # registers are allocated 8 per thread at a time
        for kind, registers, where in templates.setmaxnreg_sites(body):
            if kind == "inc" and registers < launched:
                raise UserError(
                    f"T.set_max_nreg({registers}, 1) in kernel '{kernel}': ptxas launches the kernel with "
                    f"{counts[kernel]} registers per thread, and a warpgroup can only raise its count above "
                    f"that ({registers} would be an illegal instruction on the GPU). Ask for at least {launched}, "
                    "or for the same count in every raising warpgroup (e.g. 240 + 240 + 24 for 384 threads)"
                    + _location(where)
                )


def _location(where) -> str:
    """The user's line of a T.set_max_nreg (`templates.mark_setmaxnreg_lines`), as errors show it."""
    return "" if where is None else "\n" + format_location(*where)
