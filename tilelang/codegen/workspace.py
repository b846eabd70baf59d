"""Global workspaces (`T.alloc_global`) in the host launcher.

A `T.alloc_global` buffer is allocated in the host function, around the kernel launches that use
it: TVM's host lowering turns it into `TVMBackendAllocWorkspace` / `TVMBackendFreeWorkspace`, calls
into TVM's runtime, which a tilelang library does not link (TVM's `cuda_host` codegen refuses
them). `rename_calls` points those calls at `tl_workspace_alloc` / `tl_workspace_free`, which
`HELPERS` defines in the launcher's unit (internal linkage: every kernel library has its own), and
`bind` removes the `extern "C"` declarations TVM's codegen writes for them; a workspace that TVM
gave vector elements is declared with scalar ones (`scalar_elements`). The helpers:

- with the caller's tensor allocator (tvm-ffi's environment allocator: torch's caching allocator
  when the kernel is called with torch tensors) a tensor of the workspace's size, released once the
  kernels are queued: the caching allocator reuses memory in stream order;
- without one, `cudaMallocAsync` / `cudaFreeAsync` on the stream the kernels launch on.
"""

from __future__ import annotations

import functools
import re

import tvm
import tvm_ffi
from tvm import ir, tirx

ALLOC, FREE = "tl_workspace_alloc", "tl_workspace_free"
_RENAMES = {"tirx.TVMBackendAllocWorkspace": ALLOC, "tirx.TVMBackendFreeWorkspace": FREE}

HELPERS = r"""
// T.alloc_global workspaces (tilelang/codegen/workspace.py): the environment's tensor allocator when
// there is one (torch's caching allocator, stream-ordered), else CUDA's stream-ordered allocator.
namespace {
struct TlWorkspace {
  void* data;
  TVMFFIObjectHandle tensor;  // nullptr: from cudaMallocAsync
  cudaStream_t stream;
};
thread_local TlWorkspace tl_workspaces[64];
thread_local int tl_num_workspaces = 0;

void* tl_workspace_alloc(int device_type, int device_id, uint64_t nbytes, int dtype_code, int dtype_bits) {
  (void)dtype_code;
  (void)dtype_bits;
  if (tl_num_workspaces == 64) {
    TVMFFIErrorSetRaisedFromCStr("RuntimeError", "more than 64 T.alloc_global workspaces live at once");
    return nullptr;
  }
  cudaStream_t stream = static_cast<cudaStream_t>(TVMFFIEnvGetStream(device_type, device_id));
  TlWorkspace w{nullptr, nullptr, stream};
  if (TVMFFIEnvGetDLPackManagedTensorAllocator() != nullptr) {
    int64_t shape[1] = {static_cast<int64_t>(nbytes > 0 ? nbytes : 1)};
    DLTensor prototype{};
    prototype.device = DLDevice{static_cast<DLDeviceType>(device_type), device_id};
    prototype.ndim = 1;
    prototype.dtype = DLDataType{kDLUInt, 8, 1};
    prototype.shape = shape;
    if (TVMFFIEnvTensorAlloc(&prototype, &w.tensor) != 0) return nullptr;
    const DLTensor* t = reinterpret_cast<const DLTensor*>(static_cast<char*>(w.tensor) + sizeof(TVMFFIObject));
    w.data = static_cast<char*>(t->data) + t->byte_offset;
  } else {
    cudaError_t err = cudaSetDevice(device_id);
    if (err == cudaSuccess) err = cudaMallocAsync(&w.data, nbytes > 0 ? nbytes : 1, stream);
    if (err != cudaSuccess) {
      TVMFFIErrorSetRaisedFromCStr("RuntimeError", cudaGetErrorString(err));
      return nullptr;
    }
  }
  tl_workspaces[tl_num_workspaces++] = w;
  return w.data;
}

int tl_workspace_free(int device_type, int device_id, const void* data) {
  (void)device_type;
  (void)device_id;
  for (int k = tl_num_workspaces - 1; k >= 0; --k) {
    if (tl_workspaces[k].data != data) continue;
    TlWorkspace w = tl_workspaces[k];
    tl_workspaces[k] = tl_workspaces[--tl_num_workspaces];
    if (w.tensor != nullptr) return TVMFFIObjectDecRef(w.tensor);
    cudaError_t err = cudaFreeAsync(w.data, w.stream);
    if (err != cudaSuccess) {
      TVMFFIErrorSetRaisedFromCStr("RuntimeError", cudaGetErrorString(err));
      return -1;
    }
    return 0;
  }
  TVMFFIErrorSetRaisedFromCStr("RuntimeError", "tl_workspace_free: not a T.alloc_global workspace");
  return -1;
}
}  // namespace
"""


def rename_calls(host_mod: tvm.IRModule) -> tuple[tvm.IRModule, bool]:
    """The host module with TVM's workspace calls pointed at `HELPERS` and its workspaces declared
    with scalar elements (`scalar_elements`), and whether it has any."""
    found = []

    def on_call(call):
        name = _RENAMES.get(call.op.name) if isinstance(call.op, ir.Op) else None
        if name is None:
            return call
        found.append(name)
        return ir.Call(ir.Op.get("tirx.call_extern"), [tirx.StringImm(name), *call.args], ret_ty=call.ty)

    funcs = {gv: tvm_ffi.structural_map(f, [(ir.Call, on_call)]) for gv, f in host_mod.functions.items()}
    if not found:
        return host_mod, False
    funcs = {gv: scalar_elements(f) if isinstance(f, tirx.PrimFunc) else f for gv, f in funcs.items()}
    return tvm.IRModule(funcs, attrs=host_mod.attrs), True


def scalar_elements(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """The host function with each workspace of vector elements declared with scalar ones.

    TVM's storage rewrite gives an allocation whose every access is a vector of the same lanes that
    vector type (a float16 workspace stored and loaded 8 at a time becomes `float16x8`); for a
    `T.alloc_global` the allocation is the host function's, so the launcher declared
    `half8* W = (half8*)tl_workspace_alloc(...)`, and the host unit has no `half8` (CUDA's vector
    types are the device unit's): it did not compile. The host only passes the pointer on (every
    kernel parameter is launched as a `void*`), so the same bytes declared as `lanes` times as many
    scalars change nothing but the spelling; the kernels keep their vector pointers."""
    scalar = []  # (workspace, its scalar declaration)

    def on_decl(decl):
        buf, dtype = decl.buffer, tvm_ffi.dtype(str(decl.buffer.dtype))
        if dtype.lanes > 1 and isinstance(decl.data, ir.Call) and _is_workspace_alloc(decl.data):
            n = functools.reduce(lambda a, b: a * b, buf.shape, 1) * dtype.lanes
            scalar.append((buf, tirx.decl_buffer((n,), str(dtype.with_lanes(1)), name=buf.name, scope=buf.scope())))
        return decl

    tvm_ffi.structural_map(func.body, [(tirx.DeclBuffer, on_decl)])
    if not scalar:
        return func

    def on_buffer(buf):
        return next((new for old, new in scalar if old.same_as(buf)), buf)

    def on_decl_scalar(decl):
        # The allocation call's result is cast to its type too: the scalar pointer.
        if not any(new.same_as(decl.buffer) for _, new in scalar):
            return decl
        call = decl.data
        data = ir.Call(call.op, list(call.args), ret_ty=decl.buffer.data.ty)
        return tirx.DeclBuffer(decl.buffer, data=data, span=decl.span)

    return tvm_ffi.structural_map(func, [(tirx.Buffer, on_buffer), (tirx.DeclBuffer, on_decl_scalar)])


def _is_workspace_alloc(call: ir.Call) -> bool:
    """`tl_workspace_alloc(...)`, as `rename_calls` spells TVM's workspace allocation."""
    op = call.op
    if not isinstance(op, ir.Op) or op.name != "tirx.call_extern" or not call.args:
        return False
    name = call.args[0]
    return isinstance(name, tirx.StringImm) and name.value == ALLOC


_DECLARATION = re.compile(
    r'#ifdef __cplusplus\nextern "C"\n#endif\nTVM_DLL [^\n]*\b(?:' + ALLOC + "|" + FREE + r")\([^\n]*\);\n"
)


def bind(code: str) -> str:
    """The launcher's source with the helpers before it and TVM's declarations of them removed."""
    return HELPERS + _DECLARATION.sub("", code)
