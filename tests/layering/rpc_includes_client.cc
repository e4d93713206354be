// Must not build: the daemon does not depend on libgpumux's public API.
#include "gpumux/client.h"
