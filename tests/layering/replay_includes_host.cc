// Must not build: an in-process replay runs on its own addresses-only device
// (replay/address_only_device.h), not on the daemon's host backend.
#include "server/backend/host/host_backend.h"
