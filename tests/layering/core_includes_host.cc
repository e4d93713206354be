// Must not build: server/core reaches a backend only through its interface.
#include "server/backend/host/host_backend.h"
