// Must not build: server/http renders the core's books and knows no backend.
#include "server/backend/host/host_backend.h"
