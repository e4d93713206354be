// Builds: the control for core_includes_host.cc, the same target reaching the
// backend through its interface.
#include "server/backend/device_backend.h"
