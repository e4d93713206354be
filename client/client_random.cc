// Client's torch.cuda.random calls (the Random service).

#include <type_traits>
#include <utility>
#include <variant>

#include "client/client_impl.h"
#include "client/host_profiler.h"
#include "client/proto_conversion.h"
#include "common/base/status_macros.h"
#include "gpumux/client.h"
#include "gpumux/random.h"

namespace gpumux {
namespace {

// The bytes `elements` values of `dtype` fill; OUT_OF_RANGE past 2^64.
absl::StatusOr<uint64_t> RandomFillBytes(Dtype dtype, uint64_t elements) {
  const uint64_t size = DtypeSize(dtype);
  if (elements > UINT64_MAX / size) {
    return absl::OutOfRangeError(absl::StrCat(elements, " elements of ", size, " bytes overflow"));
  }
  return elements * size;
}

}  // namespace

absl::Status random::ManualSeed(Client& client, uint64_t seed, std::optional<DeviceIndex> device) {
  GPUMUX_PROFILED("random::ManualSeed");
  auto& impl = ImplOf(client);
  v1::ManualSeedRequest request;
  request.set_device(device.value_or(client.CurrentDevice()).value());
  request.set_seed(seed);
  v1::ManualSeedResponse response;
  return impl.CallWithSession([&](grpc::ClientContext* context) {
    return impl.random_stub_->ManualSeed(context, request, &response);
  });
}

absl::Status random::ManualSeedAll(Client& client, uint64_t seed) {
  GPUMUX_PROFILED("random::ManualSeedAll");
  auto& impl = ImplOf(client);
  v1::ManualSeedRequest request;
  request.set_all_devices(true);
  request.set_seed(seed);
  v1::ManualSeedResponse response;
  return impl.CallWithSession([&](grpc::ClientContext* context) {
    return impl.random_stub_->ManualSeed(context, request, &response);
  });
}

absl::StatusOr<uint64_t> random::Seed(Client& client, std::optional<DeviceIndex> device) {
  GPUMUX_PROFILED("random::Seed");
  auto& impl = ImplOf(client);
  v1::SeedRequest request;
  request.set_device(device.value_or(client.CurrentDevice()).value());
  v1::SeedResponse response;
  GPUMUX_RETURN_IF_ERROR(impl.CallWithSession([&](grpc::ClientContext* context) {
    return impl.random_stub_->Seed(context, request, &response);
  }));
  return response.seed();
}

absl::StatusOr<uint64_t> random::SeedAll(Client& client) {
  GPUMUX_PROFILED("random::SeedAll");
  auto& impl = ImplOf(client);
  v1::SeedRequest request;
  request.set_all_devices(true);
  v1::SeedResponse response;
  GPUMUX_RETURN_IF_ERROR(impl.CallWithSession([&](grpc::ClientContext* context) {
    return impl.random_stub_->Seed(context, request, &response);
  }));
  return response.seed();
}

absl::StatusOr<uint64_t> random::InitialSeed(Client& client, std::optional<DeviceIndex> device) {
  GPUMUX_PROFILED("random::InitialSeed");
  auto& impl = ImplOf(client);
  v1::InitialSeedRequest request;
  request.set_device(device.value_or(client.CurrentDevice()).value());
  v1::SeedResponse response;
  GPUMUX_RETURN_IF_ERROR(impl.CallWithSession([&](grpc::ClientContext* context) {
    return impl.random_stub_->InitialSeed(context, request, &response);
  }));
  return response.seed();
}

absl::StatusOr<std::string> random::GetRngState(Client& client, std::optional<DeviceIndex> device) {
  GPUMUX_PROFILED("random::GetRngState");
  auto& impl = ImplOf(client);
  v1::GetRngStateRequest request;
  request.set_device(device.value_or(client.CurrentDevice()).value());
  v1::GetRngStateResponse response;
  GPUMUX_RETURN_IF_ERROR(impl.CallWithSession([&](grpc::ClientContext* context) {
    return impl.random_stub_->GetState(context, request, &response);
  }));
  if (response.states_size() != 1) {
    return absl::InternalError("gpumuxd returned " + std::to_string(response.states_size()) +
                               " RNG states for one device");
  }
  return std::move(*response.mutable_states(0));
}

absl::Status random::SetRngState(Client& client, absl::string_view state,
                                 std::optional<DeviceIndex> device) {
  GPUMUX_PROFILED("random::SetRngState");
  auto& impl = ImplOf(client);
  v1::SetRngStateRequest request;
  request.set_device(device.value_or(client.CurrentDevice()).value());
  request.add_states(std::string(state));
  v1::SetRngStateResponse response;
  return impl.CallWithSession([&](grpc::ClientContext* context) {
    return impl.random_stub_->SetState(context, request, &response);
  });
}

absl::StatusOr<std::vector<std::string>> random::GetRngStateAll(Client& client) {
  GPUMUX_PROFILED("random::GetRngStateAll");
  auto& impl = ImplOf(client);
  v1::GetRngStateRequest request;
  request.set_all_devices(true);
  v1::GetRngStateResponse response;
  GPUMUX_RETURN_IF_ERROR(impl.CallWithSession([&](grpc::ClientContext* context) {
    return impl.random_stub_->GetState(context, request, &response);
  }));
  return std::vector<std::string>(response.states().begin(), response.states().end());
}

absl::Status random::SetRngStateAll(Client& client, absl::Span<const std::string> states) {
  GPUMUX_PROFILED("random::SetRngStateAll");
  auto& impl = ImplOf(client);
  v1::SetRngStateRequest request;
  request.set_all_devices(true);
  for (const std::string& state : states) request.add_states(state);
  v1::SetRngStateResponse response;
  return impl.CallWithSession([&](grpc::ClientContext* context) {
    return impl.random_stub_->SetState(context, request, &response);
  });
}

absl::StatusOr<GenerateResult> random::Generate(Client& client, const DeviceBuffer& dst,
                                                uint64_t offset, Dtype dtype, uint64_t elements,
                                                const Distribution& distribution,
                                                const CopyOptions& options) {
  GPUMUX_PROFILED("random::Generate");
  auto& impl = ImplOf(client);
  if (options.wait) gpumux_profiled_call_.Waited();
  if (!dst.valid()) {
    return absl::InvalidArgumentError("the destination is an empty DeviceBuffer");
  }
  GPUMUX_ASSIGN_OR_RETURN(const Stream stream,
                          impl.ResolveStream(options.stream, dst.device(), "the fill"));
  v1::GenerateRequest request;
  GPUMUX_ASSIGN_OR_RETURN(const uint64_t bytes, RandomFillBytes(dtype, elements));
  GPUMUX_RETURN_IF_ERROR(impl.SetRange(request.mutable_dst(), dst, offset, bytes, "destination"));
  request.set_dtype(ToProto(dtype));
  request.set_elements(elements);
  std::visit(
      [&request](const auto& d) {
        using D = std::decay_t<decltype(d)>;
        if constexpr (std::is_same_v<D, Uniform>) {
          request.mutable_uniform()->set_low(d.low);
          request.mutable_uniform()->set_high(d.high);
        } else if constexpr (std::is_same_v<D, Normal>) {
          request.mutable_normal()->set_mean(d.mean);
          request.mutable_normal()->set_std(d.std);
        } else {
          request.mutable_bits();
        }
      },
      distribution);
  *request.mutable_options() = ToProto(stream, options);
  v1::GenerateResponse response;
  GPUMUX_RETURN_IF_ERROR(impl.CallWithSession([&](grpc::ClientContext* context) {
    return impl.random_stub_->Generate(context, request, &response);
  }));
  impl.NoteDaemonWork(dst, stream, request.options().wait());
  GenerateResult result;
  result.seed = response.seed();
  result.offset = response.offset();
  result.completion = impl.AdoptCompletionEvent(stream.device(), response.event(),
                                                std::move(*response.mutable_event_ipc_handle()));
  return result;
}

}  // namespace gpumux
