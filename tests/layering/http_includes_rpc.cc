// Must not build: server/http reads the core's books; gRPC's side (server/rpc)
// reaches it only through a callback the daemon wires.
#include "server/rpc/call_metrics.h"
