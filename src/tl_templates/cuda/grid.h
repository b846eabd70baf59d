// Grid-wide barrier (T.sync_grid): every thread of every block of the launch waits here until all
// have arrived. Only meaningful in a cooperative launch, where the driver guarantees every block is
// resident at once and provides the barrier's workspace; the host launcher launches kernels that
// call it cooperatively (tilelang/codegen/cuda.py), and the launch fails with
// cudaErrorCooperativeLaunchTooLarge when the grid does not fit on the GPU at once.
#pragma once

#include <cooperative_groups.h>

#include "common.h"

namespace tl {

TL_DEVICE void sync_grid() { cooperative_groups::this_grid().sync(); }

}  // namespace tl
