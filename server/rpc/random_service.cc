#include "server/rpc/random_service.h"

#include <string>
#include <utility>
#include <vector>

#include "common/base/status_macros.h"
#include "server/rpc/copy_proto.h"
#include "server/rpc/random_proto.h"
#include "server/rpc/serve_session_call.h"

namespace gpumux {

grpc::ServerUnaryReactor* RandomService::ManualSeed(grpc::CallbackServerContext* context,
                                                    const v1::ManualSeedRequest* request,
                                                    v1::ManualSeedResponse* /*response*/) {
  return ServeSessionCall(context, *sessions_, [&](SessionId session) -> absl::Status {
    if (request->all_devices()) {
      rng_->ManualSeedAll(session, request->seed());
      return absl::OkStatus();
    }
    return rng_->ManualSeed(session, DeviceIndex(request->device()), request->seed());
  });
}

grpc::ServerUnaryReactor* RandomService::Seed(grpc::CallbackServerContext* context,
                                              const v1::SeedRequest* request,
                                              v1::SeedResponse* response) {
  return ServeSessionCall(context, *sessions_, [&](SessionId session) -> absl::Status {
    if (request->all_devices()) {
      response->set_seed(rng_->SeedAll(session));
      return absl::OkStatus();
    }
    GPUMUX_ASSIGN_OR_RETURN(uint64_t seed, rng_->Seed(session, DeviceIndex(request->device())));
    response->set_seed(seed);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* RandomService::InitialSeed(grpc::CallbackServerContext* context,
                                                     const v1::InitialSeedRequest* request,
                                                     v1::SeedResponse* response) {
  return ServeSessionCall(context, *sessions_, [&](SessionId session) -> absl::Status {
    GPUMUX_ASSIGN_OR_RETURN(uint64_t seed,
                            rng_->InitialSeed(session, DeviceIndex(request->device())));
    response->set_seed(seed);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* RandomService::GetState(grpc::CallbackServerContext* context,
                                                  const v1::GetRngStateRequest* request,
                                                  v1::GetRngStateResponse* response) {
  return ServeSessionCall(context, *sessions_, [&](SessionId session) -> absl::Status {
    if (request->all_devices()) {
      for (std::string& state : rng_->GetStateAll(session)) response->add_states(std::move(state));
      return absl::OkStatus();
    }
    GPUMUX_ASSIGN_OR_RETURN(std::string state,
                            rng_->GetState(session, DeviceIndex(request->device())));
    response->add_states(std::move(state));
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* RandomService::SetState(grpc::CallbackServerContext* context,
                                                  const v1::SetRngStateRequest* request,
                                                  v1::SetRngStateResponse* /*response*/) {
  return ServeSessionCall(context, *sessions_, [&](SessionId session) -> absl::Status {
    if (request->all_devices()) {
      return rng_->SetStateAll(
          session, std::vector<std::string>(request->states().begin(), request->states().end()));
    }
    GPUMUX_ASSIGN_OR_RETURN(absl::string_view state, SingleState(*request));
    return rng_->SetState(session, DeviceIndex(request->device()), state);
  });
}

grpc::ServerUnaryReactor* RandomService::Generate(grpc::CallbackServerContext* context,
                                                  const v1::GenerateRequest* request,
                                                  v1::GenerateResponse* response) {
  auto body = [work = work_, request, response](SessionId session) -> absl::Status {
    GPUMUX_ASSIGN_OR_RETURN(RngRequest rng, FromProto(*request));
    GPUMUX_ASSIGN_OR_RETURN(
        GenerateDone done,
        work->Generate(session, AllocationId(request->dst().allocation_id()),
                       request->dst().offset(), rng, FromProto(request->options())));
    response->set_seed(done.drawn_from.seed);
    response->set_offset(done.drawn_from.offset);
    SetCompletionEvent(done.work, response);
    return absl::OkStatus();
  };
  return ServeSessionCallBlockingIf(request->options().wait(), context, *sessions_, *executor_,
                                    std::move(body));
}

}  // namespace gpumux
