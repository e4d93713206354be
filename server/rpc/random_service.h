#pragma once

// gpumux.v1.Random: a thin adapter from the wire to RngGenerators (state)
// and DeviceWork (fills); conversion lives in random_proto.h. Generate with
// wait runs on the blocking executor.

#include "gpumux/v1/random.grpc.pb.h"
#include "server/core/device_work.h"
#include "server/core/rng_generators.h"
#include "server/core/session_registry.h"
#include "server/rpc/blocking_executor.h"

namespace gpumux {

class RandomService final : public v1::Random::CallbackService {
 public:
  // All must outlive the service.
  RandomService(RngGenerators* rng, DeviceWork* work, const SessionRegistry* sessions,
                BlockingExecutor* executor)
      : rng_(rng), work_(work), sessions_(sessions), executor_(executor) {}

  grpc::ServerUnaryReactor* ManualSeed(grpc::CallbackServerContext* context,
                                       const v1::ManualSeedRequest* request,
                                       v1::ManualSeedResponse* response) override;
  grpc::ServerUnaryReactor* Seed(grpc::CallbackServerContext* context,
                                 const v1::SeedRequest* request,
                                 v1::SeedResponse* response) override;
  grpc::ServerUnaryReactor* InitialSeed(grpc::CallbackServerContext* context,
                                        const v1::InitialSeedRequest* request,
                                        v1::SeedResponse* response) override;
  grpc::ServerUnaryReactor* GetState(grpc::CallbackServerContext* context,
                                     const v1::GetRngStateRequest* request,
                                     v1::GetRngStateResponse* response) override;
  grpc::ServerUnaryReactor* SetState(grpc::CallbackServerContext* context,
                                     const v1::SetRngStateRequest* request,
                                     v1::SetRngStateResponse* response) override;
  grpc::ServerUnaryReactor* Generate(grpc::CallbackServerContext* context,
                                     const v1::GenerateRequest* request,
                                     v1::GenerateResponse* response) override;

 private:
  RngGenerators* rng_;
  DeviceWork* work_;
  const SessionRegistry* sessions_;
  BlockingExecutor* executor_;
};

}  // namespace gpumux
