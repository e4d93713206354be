// Must not build: gRPC's generated stubs belong to server/rpc and the
// client; the core below them knows no wire.
#include "gpumux/v1/session.grpc.pb.h"
