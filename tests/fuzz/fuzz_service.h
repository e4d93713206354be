#pragma once

// FuzzService: one gRPC service as its libFuzzer target drives it. It lists
// the service's methods in the order of its descriptor (checked, so a method
// added to the .proto fails every run until the target covers it), each with
// seed requests in protobuf text format. An input's first byte picks the
// method (modulo their number); the rest are that method's request bytes,
// which go to the daemon raw through a generic stub and, when they parse as
// the request message, again through the typed stub (FuzzHarness checks both
// answers). Seeds are written as such inputs: `TARGET -write_seeds=DIR`
// writes one file per seed into DIR and exits. A target's .cc only defines
// TargetService().

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "tests/fuzz/fuzz_harness.h"

namespace gpumux::fuzz {

struct FuzzMethod {
  std::string name;  // as in the .proto
  std::function<void(FuzzHarness&, absl::string_view request)> call;
  std::vector<std::string> seeds;  // serialized requests
};

class FuzzService {
 public:
  // Aborts unless `methods` are the methods of `service` (its full name), in order.
  FuzzService(absl::string_view service, std::vector<FuzzMethod> methods);

  // For LLVMFuzzerInitialize: handles -write_seeds=DIR (and exits then).
  void Initialize(int argc, char** argv) const;
  // For LLVMFuzzerTestOneInput: calls the method `data` picks, then the
  // harness's per-input checks.
  void TestOneInput(const uint8_t* data, size_t size) const;

 private:
  std::vector<FuzzMethod> methods_;
};

// The service of a fuzz target: its .cc defines this, and the libFuzzer
// entry points (fuzz_service.cc) drive it.
const FuzzService& TargetService();

// The daemon's --allocator-conf for this target: "" (PyTorch's default
// mode) unless the target's sources define it (a weak default in the
// harness), as memory_compact_fuzzer does for compact mode.
const char* FuzzAllocatorConf();

// Seeds: `texts` parsed as messages of `prototype`'s type and serialized;
// aborts on a text that does not parse.
std::vector<std::string> SerializeSeeds(const google::protobuf::Message& prototype,
                                        std::initializer_list<std::string> texts);

// For seeds, in text format (a quoted bytes value): a host-backend
// interprocess event handle, well formed, that names no event.
inline constexpr char kSeedEventHandle[] =
    "'gmxhev1\\0/gpumux-1-ev-0123456789abcdef"
    "\\0\\0\\0\\0\\0\\0\\0\\0\\0\\0\\0\\0\\0\\0\\0\\0\\0\\0\\0\\0\\0\\0\\0\\0\\0\\0\\0'";

// A unary method of `Service`; `typed` is its typed stub method, e.g.
// Unary<v1::Memory>("Allocate", &v1::Memory::Stub::Allocate, {"device: 0 size: 4096"}).
template <typename Service, typename Request, typename Response>
FuzzMethod Unary(std::string name,
                 grpc::Status (Service::Stub::*typed)(grpc::ClientContext*, const Request&,
                                                      Response*),
                 std::initializer_list<std::string> seeds) {
  std::string path = absl::StrCat("/", Service::service_full_name(), "/", name);
  auto call = [path, typed](FuzzHarness& harness, absl::string_view bytes) {
    std::string reply;
    if (harness.CallRaw(path, bytes, &reply).ok()) {
      Response response;
      if (!response.ParseFromString(reply)) {
        FuzzHarness::Fail(absl::StrCat(path, " answered OK with a reply that does not parse"));
      }
      harness.Track(response);
    }
    Request request;
    if (!request.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) return;
    Response response;
    const grpc::Status status =
        (harness.Stub<Service>().*typed)(harness.Context().get(), request, &response);
    harness.CheckStatus(absl::StrCat(path, " (typed stub)"), status, bytes);
    if (status.ok()) harness.Track(response);
  };
  return FuzzMethod{std::move(name), std::move(call), SerializeSeeds(Request(), seeds)};
}

// `method` with the inputs that parse as a `Request` for which `skip` holds
// left out: requests the daemon must answer but the harness cannot take
// (ending its own session, or waiting longer than a call's deadline). The
// daemon parses the bytes as this does, so it would see the same request.
template <typename Request>
FuzzMethod Unless(FuzzMethod method, std::function<bool(const Request&)> skip) {
  method.call = [call = std::move(method.call), skip = std::move(skip)](FuzzHarness& harness,
                                                                        absl::string_view bytes) {
    Request request;
    if (request.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())) && skip(request)) {
      return;
    }
    call(harness, bytes);
  };
  return method;
}

}  // namespace gpumux::fuzz
