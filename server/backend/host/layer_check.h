#pragma once

// Every header of the host backend includes this first. The targets above
// the backend interface (gpumux::allocator, gpumux::core, gpumux::rpc)
// define GPUMUX_BACKEND_INTERFACE_ONLY, so an include of the host backend's
// own files from them fails to build: above the backend, a backend is
// reached only through server/backend/device_backend.h and its neighbours.

#ifdef GPUMUX_BACKEND_INTERFACE_ONLY
#error "this target reaches the backend only through its interface (server/backend/*.h), not server/backend/host/"
#endif
