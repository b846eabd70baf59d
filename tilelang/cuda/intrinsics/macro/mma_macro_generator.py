"""`TensorCoreIntrinEmitter`: the per-warp statements of a hand-written mma.sync GEMM, emitted into
the kernel being traced (the public TileLang's "expert" API).

A kernel keeps its operands in each thread's own registers (`T.alloc_local`) and calls, per K step:

    emitter.ldmatrix_a(A_local, A_shared, ki)   # ldmatrix.x4 per 16-row tile of the warp
    emitter.ldmatrix_b(B_local, B_shared, ki)   # ldmatrix.x4 (x2 for 8-wide tiles) per column tile
    emitter.mma(A_local, B_local, C_local)      # mma.sync m16n8k* per 16 x 8 atom

and at the end `emitter.stmatrix(C_local, C_shared)` (each thread stores its accumulators). Each
call emits plain per-thread TIR around two device intrinsics (`tilelang/intrinsics.py` LDMATRIX and
MMA_SYNC, `tl_templates/cuda/warp_mma.h`): the compiler passes them through as they are, re-indexing
the shared-memory addresses through the tiles' annotated layouts (`make_mma_swizzle_layout`).

The block's warps tile the block's output `block_row_warps x block_col_warps`; warp w of the block
(threadIdx.x // 32) has warp_m = w % block_row_warps and warp_n = w // block_row_warps (with
`is_m_first`, warp_n = w % block_col_warps and warp_m = w // block_col_warps). Each warp computes
`warp_row_tiles x warp_col_tiles` of the output as `warp_rows x warp_cols` tiles of 16 x 16 (16 x 8
when `warp_col_tiles` is not a multiple of 16). Registers per thread, in the PTX fragment order
(`layout/mma_layout.py`):

    A_local: warp_rows * local_size_a    (tile i from i * local_size_a)
    B_local: warp_cols * local_size_b    (tile j from j * local_size_b)
    C_local: warp_rows * warp_cols * local_size_out   (tile (i, j) from (i * warp_cols + j) * local_size_out)
"""

from __future__ import annotations

import builtins

from tvm import ir, tirx
from tvm.script.ir_builder import tirx as _tb

from tilelang import intrinsics
from tilelang.cuda.intrinsics.layout import mma_layout
from tilelang.dtypes import bits as dtype_bits
from tilelang.dtypes import canonical
from tilelang.errors import UserError
from tilelang.language import kernel as _kernel

# (A, B, accumulator) types an mma.sync atom of warp_mma.h multiplies, and the atom's K.
SUPPORTED = {
    ("float16", "float16", "float32"): 16,
    ("float16", "float16", "float16"): 16,
    ("bfloat16", "bfloat16", "float32"): 16,
    ("float32", "float32", "float32"): 8,  # tf32
    ("int8", "int8", "int32"): 32,
}


class TensorCoreIntrinEmitter:
    """Emits a warp's ldmatrix / mma.sync / accumulator-store statements for one block tiling.

    Args:
        a_dtype, b_dtype, accum_dtype: operand and accumulator types (see SUPPORTED).
        a_transposed: A is stored k x m (else m x k). b_transposed: B is stored n x k (else k x n).
        block_row_warps, block_col_warps: the warps of the block along the output's rows and columns.
        warp_row_tiles, warp_col_tiles: the output rows (a multiple of 16) and columns (of 8) of a warp.
        chunk: the K of one shared tile (a multiple of the atom's K); `ki` of the loads counts atoms in it.
        reduce_k: warps along K (the threadIdx.y the loads' `rk` gives); the tiles hold reduce_k * chunk.
        num_elems_per_byte: 1 (packed sub-byte operands are not supported).
        is_m_first: the order of warps in the block (above).
        thread_var: the thread index to use (default: the kernel's threadIdx.x).

    Errors: UserError for an unsupported type triple or a tiling the atoms do not divide.

    Example:
        emitter = TensorCoreIntrinEmitter(a_dtype=T.float16, b_dtype=T.float16, accum_dtype=T.float32,
                                          b_transposed=True, block_row_warps=2, block_col_warps=2,
                                          warp_row_tiles=32, warp_col_tiles=32, chunk=32)
    """

    M_DIM = 16
    WARP_SIZE = 32

    def __init__(
        self,
        a_dtype="float16",
        b_dtype="float16",
        accum_dtype="float16",
        a_transposed: bool = False,
        b_transposed: bool = False,
        block_row_warps: int = 2,
        block_col_warps: int = 2,
        warp_row_tiles: int = 8,
        warp_col_tiles: int = 8,
        chunk: int = 16,
        reduce_k: int = 1,
        num_elems_per_byte: int = 1,
        is_m_first: bool | None = False,
        thread_var=None,
    ):
        self.a_dtype, self.b_dtype, self.accum_dtype = canonical(a_dtype), canonical(b_dtype), canonical(accum_dtype)
        types = (self.a_dtype, self.b_dtype, self.accum_dtype)
        if types not in SUPPORTED:
            known = ", ".join("/".join(t) for t in SUPPORTED)
            raise UserError(
                f"TensorCoreIntrinEmitter: no mma.sync atom multiplies {'/'.join(types)}; supported: {known}"
            )
        if num_elems_per_byte != 1:
            raise UserError(
                "TensorCoreIntrinEmitter: packed sub-byte operands (num_elems_per_byte > 1) are not supported"
            )
        self.a_transposed, self.b_transposed = bool(a_transposed), bool(b_transposed)
        self.block_row_warps, self.block_col_warps = int(block_row_warps), int(block_col_warps)
        self.warp_row_tiles, self.warp_col_tiles = int(warp_row_tiles), int(warp_col_tiles)
        self.chunk, self.reduce_k = int(chunk), int(reduce_k)
        self.num_elems_per_byte = 1
        self.is_m_first = bool(is_m_first) if is_m_first is not None else False
        self.thread_var = thread_var

        self.k_dim = SUPPORTED[types]
        if self.warp_row_tiles < 16 or self.warp_row_tiles % 16:
            raise UserError(f"TensorCoreIntrinEmitter: warp_row_tiles must be a multiple of 16, got {warp_row_tiles}")
        if self.warp_col_tiles < 8 or self.warp_col_tiles % 8:
            raise UserError(f"TensorCoreIntrinEmitter: warp_col_tiles must be a multiple of 8, got {warp_col_tiles}")
        if self.chunk < self.k_dim or self.chunk % self.k_dim:
            raise UserError(
                f"TensorCoreIntrinEmitter: chunk must be a multiple of the {self.a_dtype} atom's K = {self.k_dim}, "
                f"got {chunk}"
            )
        self.n_dim = 16 if self.warp_col_tiles % 16 == 0 else 8
        self.micro_size_x, self.micro_size_y, self.micro_size_k = self.M_DIM, self.n_dim, self.k_dim
        self.warp_rows = self.warp_row_tiles // self.M_DIM
        self.warp_cols = self.warp_col_tiles // self.n_dim
        self.local_size_a = self.M_DIM * self.k_dim // self.WARP_SIZE
        self.local_size_b = self.n_dim * self.k_dim // self.WARP_SIZE
        self.local_size_out = self.M_DIM * self.n_dim // self.WARP_SIZE
        self.threads = self.WARP_SIZE * self.block_row_warps * self.block_col_warps * self.reduce_k
        self.mma_prefix = f"m16n8k{self.k_dim}"

    # ---- threads ----------------------------------------------------------------------------------

    def get_thread_binding(self):
        """The thread index the statements use: `thread_var`, else the kernel's threadIdx.x."""
        return self.thread_var if self.thread_var is not None else _kernel.get_thread_binding(0)

    def extract_thread_binding(self, thread_id, is_m_first: bool | None = None):
        """(lane, warp_n, warp_m) of thread `thread_id` (the warp order of the class docstring)."""
        m_first = self.is_m_first if is_m_first is None else is_m_first
        lane, warp = thread_id % self.WARP_SIZE, thread_id // self.WARP_SIZE
        if m_first:
            return lane, warp % self.block_col_warps, (warp // self.block_col_warps) % self.block_row_warps
        return lane, (warp // self.block_row_warps) % self.block_col_warps, warp % self.block_row_warps

    @property
    def mma_num_inst_m(self) -> int:
        """mma tiles along M in a warp (`warp_rows`)."""
        return self.warp_rows

    @property
    def mma_num_inst_n(self) -> int:
        """mma tiles along N in a warp (`warp_cols`)."""
        return self.warp_cols

    # ---- the statements -----------------------------------------------------------------------------

    def ldmatrix_a(self, A_local_buf, A_shared_buf, ki, rk=0):  # noqa: N803  (the public names)
        """Load this warp's A tiles of K step `ki` (of warp K-slice `rk`) into A_local: one
        ldmatrix.x4 per 16-row tile (8-bit or 32-bit elements stored k x m: one load per element)."""
        self._check_threads("ldmatrix_a")
        self._check_local(A_local_buf, self.a_dtype, self.warp_rows * self.local_size_a, "ldmatrix_a", "A_local")
        rows, cols = (self.chunk * self.reduce_k, self._block_m) if self.a_transposed else (self._block_m, self.chunk)
        tile = _Tile.of(A_shared_buf, self.a_dtype, rows, cols, "ldmatrix_a")
        lane, _, warp_m = self.extract_thread_binding(self.get_thread_binding())
        bits, transposed = dtype_bits(self.a_dtype), self.a_transposed
        use_ldmatrix = bits == 16 or not transposed
        with _tb.unroll(0, self.warp_rows) as i:
            wm = warp_m * self.warp_row_tiles + i * self.M_DIM
            wk = rk * self.chunk + ki * self.k_dim

            def at(m, k):
                return tile.load(wk + k, wm + m) if transposed else tile.load(wm + m, wk + k)

            if use_ldmatrix:
                row, col = mma_layout.ldmatrix_row("A", lane, self.a_dtype, transposed)
                m, k = (col, row) if transposed else (row, col)
                self._ldmatrix(4, transposed, A_local_buf, i * self.local_size_a, at(m, k))
            else:
                for e in range(self.local_size_a):
                    m, k = mma_layout.operand_a_element(lane, e, bits)
                    _tb.buffer_store(A_local_buf, at(m, k), [i * self.local_size_a + e])

    def ldmatrix_b(self, B_local_buf, B_shared_buf, ki, rk=0):  # noqa: N803
        """Load this warp's B tiles of K step `ki` into B_local: one ldmatrix.x4 per 16-column tile
        (x2 per 8-column tile; 8-bit or 32-bit elements stored k x n: one load per element)."""
        self._check_threads("ldmatrix_b")
        self._check_local(B_local_buf, self.b_dtype, self.warp_cols * self.local_size_b, "ldmatrix_b", "B_local")
        rows, cols = (self._block_n, self.chunk * self.reduce_k) if self.b_transposed else (self.chunk, self._block_n)
        tile = _Tile.of(B_shared_buf, self.b_dtype, rows, cols, "ldmatrix_b")
        lane, warp_n, _ = self.extract_thread_binding(self.get_thread_binding())
        bits, transposed = dtype_bits(self.b_dtype), self.b_transposed
        use_ldmatrix = bits == 16 or transposed
        num = 4 if self.n_dim == 16 else 2
        with _tb.unroll(0, self.warp_cols) as j:
            wn = warp_n * self.warp_col_tiles + j * self.n_dim
            wk = rk * self.chunk + ki * self.k_dim

            def at(n, k):
                return tile.load(wn + n, wk + k) if transposed else tile.load(wk + k, wn + n)

            if use_ldmatrix:
                # An x2 reads the addresses of lanes 0-15 only: give the others the same rows.
                row, col = mma_layout.ldmatrix_row("B", lane if num == 4 else lane % 16, self.b_dtype, transposed)
                n, k = (row, col) if transposed else (col, row)
                self._ldmatrix(num, not transposed, B_local_buf, j * self.local_size_b, at(n, k))
            else:
                for e in range(self.local_size_b):
                    n, k = mma_layout.operand_b_element(lane, e, bits)
                    _tb.buffer_store(B_local_buf, at(n, k), [j * self.local_size_b + e])

    def mma(self, A_local_buf, B_local_buf, C_local_buf, k_inner=0):  # noqa: N803
        """C_local += A_local * B_local over the warp's tiles: one mma.sync per 16 x 8 atom.
        `k_inner` is the public signature's K step into fragment operands; registers from
        T.alloc_local hold one step, so it does not move them (as in the public TileLang)."""
        self._check_local(A_local_buf, self.a_dtype, self.warp_rows * self.local_size_a, "mma", "A_local")
        self._check_local(B_local_buf, self.b_dtype, self.warp_cols * self.local_size_b, "mma", "B_local")
        size_c = self.warp_rows * self.warp_cols * self.local_size_out
        self._check_local(C_local_buf, self.accum_dtype, size_c, "mma", "C_local")
        with _tb.unroll(0, self.warp_rows) as i, _tb.unroll(0, self.warp_cols) as j:
            self._atoms(A_local_buf, B_local_buf, C_local_buf, i, j)

    def mma_atom(self, A_local_buf, B_local_buf, C_local_buf, inst_m_idx, inst_n_idx, k_inner=0):  # noqa: N803
        """The mma.sync atoms of tile (inst_m_idx, inst_n_idx) alone (`mma` is these over every tile)."""
        self._atoms(A_local_buf, B_local_buf, C_local_buf, inst_m_idx, inst_n_idx)

    def stmatrix(self, C_local_buf, C_buf, pid_m=None, pid_n=None):  # noqa: N803
        """Store this warp's accumulators to C_buf: a 2-D block tile (block_M x block_N), a 4-D one
        (tile row, tile column, 16, n) as the public examples' C_shared, or with `pid_m` and `pid_n`
        (block coordinates) the global C at that block. Values are cast to C_buf's type."""
        size_c = self.warp_rows * self.warp_cols * self.local_size_out
        self._check_local(C_local_buf, self.accum_dtype, size_c, "stmatrix", "C_local")
        self._check_threads("stmatrix")
        dims = len(C_buf.shape)
        if dims not in (2, 4) or (dims == 4 and pid_m is not None):
            raise UserError(
                f"stmatrix: '{C_buf.name}' must be 2-D (or 4-D tiles without pid_m/pid_n), "
                f"got shape {list(C_buf.shape)}"
            )
        lane, warp_n, warp_m = self.extract_thread_binding(self.get_thread_binding())
        dtype = str(C_buf.dtype)
        with _tb.unroll(0, self.warp_rows) as i, _tb.unroll(0, self.warp_cols) as j:
            tile_m, tile_n = warp_m * self.warp_rows + i, warp_n * self.warp_cols + j
            if pid_m is not None:
                tile_m, tile_n = (
                    pid_m * self.block_row_warps * self.warp_rows + tile_m,
                    pid_n * (self.block_col_warps * self.warp_cols) + tile_n,
                )
            base = (i * self.warp_cols + j) * self.local_size_out
            # Pairs of accumulators are adjacent columns: a vectorized loop stores each pair at once.
            with _tb.serial(0, self.local_size_out // 2) as o, _tb.vectorized(0, 2) as v:
                local = o * 2 + v
                row, col = mma_layout.mma_store_32x8_to_shared_16x16_layout(lane, local)
                value = tirx.BufferLoad(C_local_buf, [base + local])
                if dtype != self.accum_dtype:
                    value = tirx.Cast(dtype, value)
                if dims == 4:
                    index = [tile_m, tile_n, row, col]
                else:
                    index = [tile_m * self.M_DIM + row, tile_n * self.n_dim + col]
                _tb.buffer_store(C_buf, value, index)

    # ---- layouts ------------------------------------------------------------------------------------

    def make_mma_store_layout(self, local_buf):
        """The fragment layout of a (block_M, block_N) accumulator `T.alloc_fragment` that holds what
        `mma` leaves in C_local: element (i, j) in the register `stmatrix` stores it from."""
        from tilelang.language.annotations import Fragment

        shape = [int(s) for s in local_buf.shape]
        if shape != [self._block_m, self._block_n]:
            raise UserError(
                f"make_mma_store_layout: '{local_buf.name}' must be the block's output "
                f"[{self._block_m}, {self._block_n}], got {shape}"
            )
        mx, ny = self.M_DIM, self.n_dim

        def lane_and_local(i, j):
            # The inverse of the accumulator map: row g + 8 * (c // 2), column 8 * atom + 2t + c % 2.
            r, c = i % mx, j % ny
            lane = 4 * (r % 8) + (c % 8) // 2
            return lane, 4 * (c // 8) + 2 * (r // 8) + c % 2

        def thread(i, j):
            tm, tn = (i // mx) // self.warp_rows, (j // ny) // self.warp_cols
            warp = tm * self.block_col_warps + tn if self.is_m_first else tn * self.block_row_warps + tm
            return warp * self.WARP_SIZE + lane_and_local(i, j)[0]

        def index(i, j):
            wi, wj = (i // mx) % self.warp_rows, (j // ny) % self.warp_cols
            return (wi * self.warp_cols + wj) * self.local_size_out + lane_and_local(i, j)[1]

        return Fragment(shape, forward_thread_fn=thread, forward_index_fn=index)

    # ---- helpers ------------------------------------------------------------------------------------

    @property
    def _block_m(self) -> int:
        return self.block_row_warps * self.warp_row_tiles

    @property
    def _block_n(self) -> int:
        return self.block_col_warps * self.warp_col_tiles

    def _atoms(self, A_local_buf, B_local_buf, C_local_buf, i, j):  # noqa: N803
        call = intrinsics.MMA_SYNC
        for atom in range(self.n_dim // 8):  # two 8-column atoms side by side in a 16-wide tile
            a = _address(A_local_buf, i * self.local_size_a)
            b = _address(B_local_buf, j * self.local_size_b + atom * (self.local_size_b * 8 // self.n_dim))
            c = _address(C_local_buf, (i * self.warp_cols + j) * self.local_size_out + atom * 4)
            _tb.evaluate(call.call({"k": self.k_dim}, a, b, c))

    def _ldmatrix(self, num, trans, local_buf, offset, shared_load):
        dst = _address(local_buf, offset)
        _tb.evaluate(intrinsics.LDMATRIX.call({"num": num, "trans": int(trans)}, dst, shared_load))

    def _check_threads(self, what):
        if self.thread_var is not None:
            return
        threads = _kernel.get_thread_extent(0)
        need = self.WARP_SIZE * self.block_row_warps * self.block_col_warps
        if isinstance(threads, builtins.int) and threads < need:
            raise UserError(
                f"{what}: the emitter's {self.block_row_warps} x {self.block_col_warps} warps need {need} threads, "
                f"the kernel has {threads}"
            )

    @staticmethod
    def _check_local(buf, dtype, size, what, role):
        if not tirx.is_buffer_var(buf):
            raise UserError(f"{what}: {role} must be a buffer from T.alloc_local, got {buf!r}")
        if buf.scope() != "local":
            hint = " (a fragment's elements are spread over the threads)" if buf.scope() == "local.fragment" else ""
            raise UserError(
                f"{what}: '{buf.name}' is in {buf.scope()} memory; the emitter keeps {role} in each thread's "
                f"registers: allocate it with T.alloc_local{hint}"
            )
        if str(buf.dtype) != dtype:
            raise UserError(f"{what}: '{buf.name}' holds {buf.dtype}, the emitter was made for {dtype}")
        elems = 1
        for s in buf.shape:
            elems *= int(s)
        if elems < size:
            raise UserError(f"{what}: '{buf.name}' has {elems} elements, the warp's tiles need {size}")


def _address(buf, offset):
    """The address of element `offset` of a 1-D per-thread buffer."""
    return tirx.address_of(tirx.BufferLoad(buf, [offset]))


class _Tile:
    """The last two dimensions of a shared tile (a buffer, a slice or an element as its origin)."""

    def __init__(self, buf, lead, origin):
        self.buf, self.lead, self.origin = buf, lead, origin

    def load(self, r, c):
        return tirx.BufferLoad(self.buf, [*self.lead, self.origin[0] + r, self.origin[1] + c])

    @staticmethod
    def of(obj, dtype, rows, cols, what) -> _Tile:
        if tirx.is_buffer_var(obj):
            buf, mins, extents = obj, [0] * len(obj.shape), list(obj.shape)
        elif isinstance(obj, ir.TensorLoad):
            buf = obj.source
            mins = [i.min if isinstance(i, ir.Range) else i for i in obj.indices]
            extents = [i.extent if isinstance(i, ir.Range) else None for i in obj.indices]
        elif hasattr(obj, "region") and hasattr(obj, "buffer"):
            buf, mins, extents = obj.buffer, [r.min for r in obj.region], [r.extent for r in obj.region]
        else:
            raise UserError(f"{what}: expected a shared buffer, a slice or an element of one, got {obj!r}")
        if not buf.scope().startswith("shared"):
            raise UserError(f"{what}: '{buf.name}' is in {buf.scope()} memory; ldmatrix reads shared memory")
        if str(buf.dtype) != dtype:
            raise UserError(f"{what}: '{buf.name}' holds {buf.dtype}, the emitter was made for {dtype}")
        if len(mins) < 2:
            raise UserError(f"{what}: '{buf.name}' must have at least 2 dimensions, got {len(mins)}")
        for got, want, name in ((extents[-2], rows, "rows"), (extents[-1], cols, "columns")):
            if isinstance(got, (builtins.int, tirx.IntImm)) and int(got) < want:
                raise UserError(
                    f"{what}: the tile of '{buf.name}' has {int(got)} {name}, the block's warps read {want}"
                )
        return _Tile(buf, mins[:-2], (mins[-2], mins[-1]))
