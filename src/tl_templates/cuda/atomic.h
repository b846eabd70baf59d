// Element atomics used by T.atomic_add: one overload per element type.
#pragma once

#include "common.h"

namespace tl {

template <typename T>
TL_DEVICE void atomic_add(T* address, T value) {
  atomicAdd(address, value);
}

}  // namespace tl
