"""A lockstep simulator of one block's traced per-thread TIR, for testing the tensor-core emitter on
the CPU: every thread runs each statement together (numpy arrays over the threads), and the two
warp-wide intrinsics (`tl.device.ldmatrix`, `tl.device.mma_sync`) act on a warp's 32 lanes as the
PTX ISA defines them. The fragment layouts below are written from the ISA's tables ("Matrix
Fragments for mma.m16n8k*", "ldmatrix"), independently of `tilelang.cuda.intrinsics.layout`.

Covers what the emitter's statements use: thread_extent attributes, buffer allocations, serial /
unrolled / vectorized loops, buffer stores and loads with integer index arithmetic, casts. Shared
tiles are seeded by name and addressed by their logical indices (a layout keeps 16-byte chunks whole,
which `ldmatrix` checks).
"""

from __future__ import annotations

import numpy as np
from tvm import ir, tirx

from tilelang import intrinsics
from tilelang.dtypes import bits as dtype_bits

_NUMPY = {
    "float16": np.float16,
    "bfloat16": np.float32,  # values only: the tests feed bf16-exact numbers
    "float32": np.float32,
    "int8": np.int8,
    "int32": np.int64,
}

_BINARY = {
    "Add": np.add,
    "Sub": np.subtract,
    "Mul": np.multiply,
    "FloorDiv": np.floor_divide,
    "FloorMod": np.mod,
    "BitwiseXor": np.bitwise_xor,
    "BitwiseAnd": np.bitwise_and,
    "Min": np.minimum,
    "Max": np.maximum,
}


class Block:
    """Runs `func` (one block) with shared tiles `seeds` ({name: array}); `shared[name]` afterwards."""

    def __init__(self, func, seeds: dict):
        self.seeds, self.env, self.local, self.shared = seeds, {}, {}, {}
        self.threads = None
        self.run(func.body)

    def tile(self, name):
        return next(v for b, v in self.shared.items() if b.name == name)

    # ---- statements --------------------------------------------------------------------------------

    def run(self, stmt):
        if isinstance(stmt, tirx.SeqStmt):
            for s in stmt.seq:
                self.run(s)
        elif isinstance(stmt, tirx.AttrStmt):
            if stmt.attr_key == "thread_extent":
                tag, extent = str(stmt.node.thread_tag), int(stmt.value)
                if tag == "threadIdx.x":
                    self.threads = extent
                    self.env[stmt.node.var] = np.arange(extent)
                else:
                    assert extent == 1 or tag.startswith("blockIdx"), tag
                    self.env[stmt.node.var] = np.zeros(1, dtype=np.int64)
            self.run(stmt.body)
        elif isinstance(stmt, tirx.AllocBuffer):
            self.allocate(stmt.buffer)
        elif isinstance(stmt, tirx.For):
            for k in range(int(stmt.min), int(stmt.min) + int(stmt.extent)):
                self.env[stmt.loop_var] = np.int64(k)
                self.run(stmt.body)
        elif isinstance(stmt, tirx.BufferStore):
            self.store(stmt.buffer, [self.value(i) for i in stmt.indices], self.value(stmt.value))
        elif isinstance(stmt, tirx.Evaluate):
            self.call(stmt.value)
        else:
            raise NotImplementedError(type(stmt).__name__)

    def allocate(self, buf):
        dtype = _NUMPY[str(buf.dtype)]
        shape = [int(s) for s in buf.shape]
        if buf.scope() == "local":
            self.local[buf] = np.zeros((self.threads, int(np.prod(shape))), dtype=dtype)
        else:
            seed = self.seeds.get(buf.name)
            self.shared[buf] = np.array(seed, dtype=dtype) if seed is not None else np.zeros(shape, dtype=dtype)

    def store(self, buf, idx, value):
        t = np.arange(self.threads)
        if buf in self.local:
            self.local[buf][t, np.broadcast_to(idx[0], t.shape)] = value
        else:
            shape = (self.threads,)
            self.shared[buf][tuple(np.broadcast_to(i, shape) for i in idx)] = np.broadcast_to(value, shape)

    # ---- expressions ---------------------------------------------------------------------------------

    def value(self, e):
        kind = type(e).__name__
        if isinstance(e, (tirx.IntImm, tirx.FloatImm)):
            return e.value
        if isinstance(e, ir.Var) and e in self.env:
            return self.env[e]
        if kind in _BINARY:
            return _BINARY[kind](self.value(e.a), self.value(e.b))
        if isinstance(e, tirx.Cast):
            return np.asarray(self.value(e.value)).astype(_NUMPY[str(e.ty.dtype)])
        if isinstance(e, ir.TensorLoad):
            idx = [self.value(i) for i in e.indices]
            t = np.arange(self.threads)
            if e.source in self.local:
                return self.local[e.source][t, np.broadcast_to(idx[0], t.shape)]
            return self.shared[e.source][tuple(np.broadcast_to(i, t.shape) for i in idx)]
        raise NotImplementedError(f"{kind}: {e}")

    # ---- the warp-wide intrinsics --------------------------------------------------------------------

    def call(self, call):
        if intrinsics.LDMATRIX.matches(call):
            p = intrinsics.LDMATRIX.template(call)
            dst, row = intrinsics.LDMATRIX.args(call)
            self.ldmatrix(p["num"], bool(p["trans"]), dst, row)
        elif intrinsics.MMA_SYNC.matches(call):
            self.mma(*intrinsics.MMA_SYNC.args(call))
        else:
            raise NotImplementedError(str(call))

    def _local_at(self, address):
        load = address.args[0]  # address_of(buf[offset])
        return self.local[load.source], np.broadcast_to(self.value(load.indices[0]), (self.threads,))

    def ldmatrix(self, num, trans, dst, row):
        tile = self.shared[row.source]
        idx = [np.broadcast_to(self.value(i), (self.threads,)) for i in row.indices]
        out, off = self._local_at(dst)
        per_row = 128 // _bits(row.source)  # elements in the 16 bytes of a row
        per_word = per_row // 4  # elements in one 32-bit register
        for w in range(self.threads // 32):
            lanes = range(32 * w, 32 * w + 32)
            for r in range(num):
                rows = []
                for j in range(8):  # lane 8r + j gives row j of matrix r
                    src = 32 * w + 8 * r + j
                    c = int(idx[-1][src])
                    assert c % per_row == 0, "an ldmatrix row must start a 16-byte chunk"
                    rows.append(tile[tuple(int(i[src]) for i in idx[:-1])][c : c + per_row])
                m = np.stack(rows)  # 8 rows of 16 bytes
                for lane in lanes:
                    q, s = (lane % 32) // 4, lane % 4
                    if trans:  # 16-bit only: column q, rows 2s and 2s + 1
                        vals = [m[2 * s, q], m[2 * s + 1, q]]
                    else:
                        vals = m[q, s * per_word : (s + 1) * per_word]
                    base = int(off[lane]) + r * per_word
                    out[lane, base : base + per_word] = vals

    def mma(self, a_addr, b_addr, c_addr):
        a_buf, a_off = self._local_at(a_addr)
        b_buf, b_off = self._local_at(b_addr)
        c_buf, c_off = self._local_at(c_addr)
        per_word = 32 // _bits(a_addr.args[0].source)
        for w in range(self.threads // 32):
            k = 8 * per_word
            A, B, C = np.zeros((16, k)), np.zeros((k, 8)), np.zeros((16, 8))
            for lane in range(32):
                t = 32 * w + lane
                for i in range(4 * per_word):
                    A[_a_element(lane, i, per_word)] = a_buf[t, a_off[t] + i]
                for i in range(2 * per_word):
                    B[_b_element(lane, i, per_word)] = b_buf[t, b_off[t] + i]
                for i in range(4):
                    C[_c_element(lane, i)] = c_buf[t, c_off[t] + i]
            D = A @ B + C
            for lane in range(32):
                t = 32 * w + lane
                for i in range(4):
                    c_buf[t, c_off[t] + i] = D[_c_element(lane, i)]


def _bits(buf) -> int:
    return dtype_bits(str(buf.dtype))


# The PTX ISA's fragment tables: element i of a lane's registers, g = lane // 4, t = lane % 4.
def _a_element(lane, i, per_word):
    g, t = lane // 4, lane % 4
    if per_word == 2:  # .f16 / .bf16, m16n8k16: a0..a7
        return g + 8 * ((i // 2) % 2), 2 * t + i % 2 + 8 * (i // 4)
    if per_word == 4:  # .s8, m16n8k32: a0..a15
        return g + 8 * ((i // 4) % 2), 4 * t + i % 4 + 16 * (i // 8)
    return g + 8 * (i % 2), t + 4 * (i // 2)  # .tf32, m16n8k8: a0..a3


def _b_element(lane, i, per_word):
    g, t = lane // 4, lane % 4
    if per_word == 2:  # b0..b3
        return 2 * t + i % 2 + 8 * (i // 2), g
    if per_word == 4:  # b0..b7
        return 4 * t + i % 4 + 16 * (i // 4), g
    return t + 4 * i, g  # b0, b1


def _c_element(lane, i):
    return lane // 4 + 8 * (i // 2), 2 * (lane % 4) + i % 2
