// memory_compact_fuzzer: the Memory service's inputs (memory_fuzzer.cc)
// against a daemon in compact mode, whose allocations are pages of
// expandable segments.

#include "tests/fuzz/fuzz_service.h"

namespace gpumux::fuzz {

const char* FuzzAllocatorConf() { return "compact_segments:True"; }

}  // namespace gpumux::fuzz
