// Must not build: libgpumux does not depend on the daemon's code.
#include "server/core/session_registry.h"
