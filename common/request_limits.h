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

}  // namespace gpumux
