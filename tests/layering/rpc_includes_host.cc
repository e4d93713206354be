// Must not build: server/rpc serves the core's books through the core's
// interfaces, never a backend of its own choosing.
#include "server/backend/host/host_backend.h"
