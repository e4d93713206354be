// Must not build: common/'s libraries see only the ones they link; tensor
// math (gpumux::tensor) has no business with interprocess memory.
#include "common/ipc/memory_socket.h"
