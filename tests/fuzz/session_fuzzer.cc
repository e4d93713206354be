// libFuzzer target for gpumux.v1.Session: the Open stream with an arbitrary
// first message (raw; typed, the parsed message is sent twice, so an open
// session also sees a message after its `open`, and after an `open` of its
// own when it is an answer), and Ping. Every session an
// input opens ends with its stream; the leak check sees none left.

#include "gpumux/v1/session.grpc.pb.h"
#include "tests/fuzz/fuzz_service.h"

namespace gpumux::fuzz {
namespace {

using v1::Session;

void CallOpen(FuzzHarness& harness, absl::string_view bytes) {
  harness.OpenRaw({std::string(bytes)});
  v1::SessionClientMessage message;
  if (!message.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) return;
  std::unique_ptr<grpc::ClientContext> context = harness.Context();
  auto stream = harness.Stub<Session>().Open(context.get());
  // An answer (cache_released, lease_blocks) reaches an open session.
  if (!message.has_open()) {
    v1::SessionClientMessage open;
    open.mutable_open()->set_client_name("fuzz-answers");
    stream->Write(open);
  }
  if (stream->Write(message)) stream->Write(message);
  stream->WritesDone();
  v1::SessionServerMessage reply;
  while (stream->Read(&reply)) {
  }
  harness.CheckStatus("/gpumux.v1.Session/Open (typed stub)", stream->Finish(), bytes);
}

}  // namespace

const FuzzService& TargetService() {
  static const FuzzService service(
      Session::service_full_name(),
      {
          FuzzMethod{
              "Open", &CallOpen,
              SerializeSeeds(
                  v1::SessionClientMessage(),
                  {"open { client_name: 'fuzz-open' pid: 1 }", "open { client_name: 'x' pid: -1 }",
                   "open { client_name: 'trainer\\342\\200\\256' }",
                   "open { client_name: 'a' tenant: 'team' labels { key: 'k' value: 'v' } }",
                   "open { client_name: 'p' profile_token: '0123456789abcdef' "
                   "records_host_calls: true }",
                   "host_profile { window_id: 1 records { functions { name: 'Allocate' "
                   "calls: 2 } } }",
                   "", "open { }", "cache_released { request_id: 1 }",
                   "lease_blocks { request_id: 1 last: true segments { device: 0 "
                   "address: 4096 blocks { address: 4096 size: 512 state: 'inactive' } } }",
                   "lease_blocks { request_id: 18446744073709551615 segments { device: -1 "
                   "blocks { size: 0 state: 'borrowed' } } }"})},
          Unary<Session>("Ping", &Session::Stub::Ping, {""}),
      });
  return service;
}

}  // namespace gpumux::fuzz
