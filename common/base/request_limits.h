#pragma once

// Bounds on the size of one request that the daemon enforces and the client
// library respects: each request is checked and applied in time linear in
// its size, and these keep that time short for every other session.

#include <cstddef>

namespace gpumux {

// Allocation ids one free request (Memory.Free, or the frees riding on an
// Allocate) may name.
inline constexpr size_t kMaxFreeIdsPerRequest = 65536;
// Interprocess wait event handles (free fences) one free request may carry.
inline constexpr size_t kMaxWaitEventHandlesPerRequest = 64;

// Tensors one collective (the Comm service) may name, inputs and outputs
// together, and devices in its device lists.
inline constexpr size_t kMaxCommTensorsPerRequest = 4096;
inline constexpr size_t kMaxCommDevicesPerRequest = 1024;
// Dimensions of one tensor a collective describes (PyTorch's TensorIterator
// takes at most 25; this only bounds the work of checking shapes).
inline constexpr size_t kMaxTensorDims = 64;

}  // namespace gpumux
