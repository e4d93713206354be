#pragma once

// ParseFailureInterceptor: a unary request whose bytes do not parse as the
// method's request message (random bytes, a string field that is not UTF-8)
// gets INVALID_ARGUMENT saying so. gRPC's callback API answers such a call
// itself with UNIMPLEMENTED and no message, before any handler runs; this
// server interceptor sees the failed parse (POST_RECV_MESSAGE without a
// message) and rewrites that status as it is sent. Streaming methods are
// left alone: the session stream reports its own protocol errors.
//
// InstallProtobufLogHandler sends protobuf's own error lines (which it
// prints to stderr on such parses) through the daemon's logger.

#include <memory>

#include "grpcpp/support/server_interceptor.h"

namespace gpumux {

class ParseFailureInterceptorFactory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override;
};

// Process-wide; idempotent.
void InstallProtobufLogHandler();

}  // namespace gpumux
