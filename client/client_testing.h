#pragma once

// Test hooks into a Client's state, for gpumux's own tests; not installed.

#include <cstddef>
#include <cstdint>

#include "gpumux/client.h"

namespace gpumux {

// How many segments `client` has mapped now.
size_t MappedSegmentCountForTest(const Client& client);
// The stats page the client's own allocator publishes to (local
// allocation), mapped writable; null without one. For tests that play a
// hostile client.
void* StatsPageForTest(const Client& client);
// How many segment mappings the client ever opened.
uint64_t OpenedMappingCountForTest(const Client& client);
// The size of the staging buffer mapped now; 0 before the first staged copy.
uint64_t StagingBufferSizeForTest(Client& client);

}  // namespace gpumux
