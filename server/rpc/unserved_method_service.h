#pragma once

// Every call that no service of a gRPC server takes lands here (a generic
// service sees only those), and is answered with what the caller needs to
// know instead of gRPC's bare UNIMPLEMENTED: a method of a service served on
// another of the daemon's listeners is FAILED_PRECONDITION, saying where;
// any other method is UNIMPLEMENTED, naming the services this listener
// serves.

#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "grpcpp/generic/async_generic_service.h"

namespace gpumux {

class UnservedMethodService final : public grpc::CallbackGenericService {
 public:
  // `listener`: where this is ("the Unix socket"); `services`: the full
  // names of the services served there; `elsewhere`: for a service served
  // on another listener, where (ends "... is served on <elsewhere>").
  UnservedMethodService(std::string listener, std::vector<std::string> services,
                        absl::flat_hash_map<std::string, std::string> elsewhere = {});

  grpc::ServerGenericBidiReactor* CreateReactor(
      grpc::GenericCallbackServerContext* context) override;

 private:
  const std::string listener_;
  const std::string services_;  // joined, for the message
  const absl::flat_hash_map<std::string, std::string> elsewhere_;
};

}  // namespace gpumux
