"""The T.* language: `import tilelang.language as T`.

Kernels are Python functions decorated with `@T.prim_func`, traced by TVM's TVMScript parser into TIR
with calls to tile ops (`tl.copy`, `tl.fill`, ...). The names here match the public TileLang API so
its kernels run unchanged. The tile ops' functions come from `tilelang.op` (every op module's
`__all__`); the rest (memory, loops, kernels, scalar math) is defined in this package.
"""

# Scalar math and expression helpers, as TVM's script namespace provides them.
from tvm.script.tirx import (  # noqa: F401
    Select,
    abs,
    address_of,
    call_extern,
    call_intrin,
    ceil,
    ceildiv,
    cos,
    erf,
    evaluate,
    exp,
    exp2,
    exp10,
    floor,
    floordiv,
    floormod,
    fmod,
    if_then_else,
    isfinite,
    isinf,
    isnan,
    likely,
    log,
    log2,
    log10,
    macro,
    max,
    min,
    nearbyint,
    pow,
    round,
    rsqrt,
    sigmoid,
    sin,
    sqrt,
    tan,
    tanh,
    truncdiv,
    truncmod,
)

from tilelang import op as _op

# Every dtype object TileLang has (T.float16, T.float, T.int4, T.float8_e4m3fn, T.float16x2, ...), T.dtype.
from tilelang.dtypes import *  # noqa: F401,F403  (T.bool, T.int, T.float shadow the builtins here)
from tilelang.language.allocate import (  # noqa: F401
    Buffer,
    FragmentBuffer,
    LocalBuffer,
    SharedBuffer,
    Tensor,
    alloc_buffer,
    alloc_fragment,
    alloc_global,
    alloc_local,
    alloc_shared,
    alloc_var,
    make_tensor,
    ptr,
)
from tilelang.language.annotations import Fragment, annotate_layout, use_swizzle  # noqa: F401
from tilelang.language.barriers import (  # noqa: F401
    alloc_barrier,
    annotate_consumer_reg_alloc,
    annotate_producer_reg_dealloc,
    barrier_arrive,
    barrier_wait,
    cp_async_barrier_noinc,
    dec_max_nreg,
    disable_warp_group_reg_alloc,
    fence_proxy_async,
    inc_max_nreg,
    mbarrier_arrive,
    mbarrier_arrive_expect_tx,
    mbarrier_expect_tx,
    mbarrier_wait_parity,
    no_set_max_nreg,
    set_max_nreg,
    tma_copy,
)
from tilelang.language.builtins import *  # noqa: F401,F403  (T.clamp, T.access_ptr, T.sync_threads, ...)
from tilelang.language.eager import const, empty  # noqa: F401
from tilelang.language.kernel import (  # noqa: F401
    Kernel,
    get_block_binding,
    get_block_bindings,
    get_thread_binding,
    get_thread_bindings,
    get_thread_extent,
    thread_binding,
    ws,
)
from tilelang.language.layouts import Layout  # noqa: F401
from tilelang.language.loops import (  # noqa: F401
    Parallel,
    Persistent,
    Pipelined,
    Serial,
    Unroll,
    Vectorized,
    serial,
    unroll,
    vectorized,
)
from tilelang.language.math import Cast, cast, infinity, max_value, min_value, reinterpret  # noqa: F401
from tilelang.language.prim_func import prim_func  # noqa: F401
from tilelang.language.symbolics import dynamic, symbolic  # noqa: F401
from tilelang.language.unsupported import *  # noqa: F401,F403  (sm_100 names: errors naming the target)

# The tile ops' user functions (T.copy, T.gemm, T.reduce_max, ...): each op module under tilelang/op/
# lists its own in `__all__`, so a new op needs no line here.
globals().update(_op.user_functions())
