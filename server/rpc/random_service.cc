#include "server/rpc/random_service.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "common/device_range.h"
#include "common/status_macros.h"
#include "server/rpc/copy_proto.h"
#include "server/rpc/serve_session_call.h"

namespace gpumux {
namespace {

absl::StatusOr<RngDtype> FromProto(v1::Dtype dtype) {
  switch (dtype) {
    case v1::DTYPE_FLOAT32: return RngDtype::kF32;
    case v1::DTYPE_FLOAT64: return RngDtype::kF64;
    case v1::DTYPE_FLOAT16: return RngDtype::kF16;
    case v1::DTYPE_BFLOAT16: return RngDtype::kBF16;
    case v1::DTYPE_INT32: return RngDtype::kI32;
    case v1::DTYPE_INT64: return RngDtype::kI64;
    case v1::DTYPE_UINT8: return RngDtype::kU8;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "dtype ", static_cast<int>(dtype), " is not one of float32, float64, float16, bfloat16, int32, int64, uint8"));
  }
}

absl::StatusOr<RngRequest> FromProto(const v1::GenerateRequest& request) {
  RngRequest out;
  GPUMUX_ASSIGN_OR_RETURN(out.dtype, FromProto(request.dtype()));
  out.elements = request.elements();
  switch (request.distribution_case()) {
    case v1::GenerateRequest::kUniform:
      out.kind = RngKind::kUniform;
      out.a = request.uniform().low();
      out.b = request.uniform().high();
      break;
    case v1::GenerateRequest::kNormal:
      out.kind = RngKind::kNormal;
      out.a = request.normal().mean();
      out.b = request.normal().std();
      break;
    case v1::GenerateRequest::kBits:
      out.kind = RngKind::kBits;
      break;
    case v1::GenerateRequest::DISTRIBUTION_NOT_SET:
      return absl::InvalidArgumentError("set the distribution: uniform, normal or bits");
  }
  return out;
}

}  // namespace

grpc::ServerUnaryReactor* RandomService::ManualSeed(grpc::CallbackServerContext* context,
                                                    const v1::ManualSeedRequest* request,
                                                    v1::ManualSeedResponse* /*response*/) {
  return ServeSessionCall(context, *sessions_, [&](SessionId session) -> absl::Status {
    if (request->all_devices()) {
      rng_->ManualSeedAll(session, request->seed());
      return absl::OkStatus();
    }
    GPUMUX_RETURN_IF_ERROR(CheckDeviceInRange(DeviceIndex(request->device()), device_count_));
    rng_->ManualSeed(session, DeviceIndex(request->device()), request->seed());
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* RandomService::Seed(grpc::CallbackServerContext* context, const v1::SeedRequest* request,
                                              v1::SeedResponse* response) {
  return ServeSessionCall(context, *sessions_, [&](SessionId session) -> absl::Status {
    if (request->all_devices()) {
      response->set_seed(rng_->SeedAll(session));
      return absl::OkStatus();
    }
    GPUMUX_RETURN_IF_ERROR(CheckDeviceInRange(DeviceIndex(request->device()), device_count_));
    response->set_seed(rng_->Seed(session, DeviceIndex(request->device())));
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* RandomService::InitialSeed(grpc::CallbackServerContext* context,
                                                     const v1::InitialSeedRequest* request,
                                                     v1::SeedResponse* response) {
  return ServeSessionCall(context, *sessions_, [&](SessionId session) -> absl::Status {
    GPUMUX_RETURN_IF_ERROR(CheckDeviceInRange(DeviceIndex(request->device()), device_count_));
    response->set_seed(rng_->InitialSeed(session, DeviceIndex(request->device())));
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* RandomService::GetState(grpc::CallbackServerContext* context,
                                                  const v1::GetRngStateRequest* request,
                                                  v1::GetRngStateResponse* response) {
  return ServeSessionCall(context, *sessions_, [&](SessionId session) -> absl::Status {
    if (request->all_devices()) {
      for (int d = 0; d < device_count_; ++d) response->add_states(rng_->GetState(session, DeviceIndex(d)));
      return absl::OkStatus();
    }
    GPUMUX_RETURN_IF_ERROR(CheckDeviceInRange(DeviceIndex(request->device()), device_count_));
    response->add_states(rng_->GetState(session, DeviceIndex(request->device())));
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* RandomService::SetState(grpc::CallbackServerContext* context,
                                                  const v1::SetRngStateRequest* request,
                                                  v1::SetRngStateResponse* /*response*/) {
  return ServeSessionCall(context, *sessions_, [&](SessionId session) -> absl::Status {
    const int count = request->states_size();
    if (!request->all_devices()) {
      GPUMUX_RETURN_IF_ERROR(CheckDeviceInRange(DeviceIndex(request->device()), device_count_));
      if (count != 1) {
        return absl::InvalidArgumentError(absl::StrCat("set_rng_state takes one state, not ", count));
      }
      return rng_->SetState(session, DeviceIndex(request->device()), request->states(0));
    }
    return rng_->SetStateAll(session, std::vector<std::string>(request->states().begin(), request->states().end()));
  });
}

grpc::ServerUnaryReactor* RandomService::Generate(grpc::CallbackServerContext* context,
                                                  const v1::GenerateRequest* request, v1::GenerateResponse* response) {
  auto body = [work = work_, request, response](SessionId session) -> absl::Status {
    GPUMUX_ASSIGN_OR_RETURN(RngRequest rng, FromProto(*request));
    GPUMUX_ASSIGN_OR_RETURN(GenerateDone done,
                            work->Generate(session, AllocationId(request->dst().allocation_id()),
                                           request->dst().offset(), rng, FromProto(request->options())));
    response->set_seed(done.drawn_from.seed);
    response->set_offset(done.drawn_from.offset);
    SetCompletionEvent(done.work, response);
    return absl::OkStatus();
  };
  return ServeSessionCallBlockingIf(request->options().wait(), context, *sessions_, *executor_, std::move(body));
}

}  // namespace gpumux
