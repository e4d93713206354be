// Must not build: the allocator, which the client links too, reaches memory
// only through common/segments/segment_source.h, never the daemon's backend.
#include "server/backend/device_backend.h"
