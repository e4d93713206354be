// libFuzzer target for the memory socket (common/ipc/memory_socket.h): arbitrary
// bytes as requests on one connection to the real daemon's memory socket,
// raw or framed with the harness session's valid credentials. Every request
// must get a well-formed reply within the harness's deadline whose code is
// an answer (never UNKNOWN, INTERNAL, UNIMPLEMENTED, DATA_LOSS), with one
// descriptor exactly when it is "ok"; a request over the size limit closes
// only its connection. The daemon answers Ping after every input
// (FuzzHarness::FinishInput).
//
// The first byte picks the framing: 0 sends the rest as is; 1 sends
// "gmxmem1 <credentials> <rest>"; 2 sends "gmxmem1 <rest> <32 hex digits>".

#include <sys/socket.h>
#include <sys/time.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/ipc/fd_passing.h"
#include "common/ipc/memory_socket.h"
#include "gpumux/common/unique_fd.h"
#include "tests/fuzz/fuzz_harness.h"

namespace gpumux::fuzz {
namespace {

constexpr absl::string_view kWriteSeedsFlag = "-write_seeds=";

UniqueFd Connect(const std::string& path) {
  absl::StatusOr<UniqueFd> socket = ConnectMemorySocket(path);
  if (!socket.ok()) FuzzHarness::Fail(socket.status().ToString());
  const auto deadline = absl::ToTimeval(FuzzHarness::kCallDeadline);
  setsockopt(socket->get(), SOL_SOCKET, SO_RCVTIMEO, &deadline, sizeof(deadline));
  return *std::move(socket);
}

void TestOneInput(absl::string_view input) {
  if (input.empty()) return;
  FuzzHarness& harness = FuzzHarness::Get();
  static UniqueFd connection;
  const std::string path = MemorySocketPath(harness.socket_path());
  if (!connection.valid()) connection = Connect(path);
  const absl::string_view rest = input.substr(1);
  std::string request;
  switch (input[0] % 3) {
    case 0:
      request = std::string(rest);
      break;
    case 1:
      request = absl::StrCat(kMemoryRequestVersion, " ", harness.credentials(), " ", rest);
      break;
    default:
      request = absl::StrCat(kMemoryRequestVersion, " ", rest, " ",
                             std::string(kMemoryFileKeyChars, 'a'));
      break;
  }
  if (request.empty()) return;
  if (send(connection.get(), request.data(), request.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(request.size())) {
    FuzzHarness::Fail(absl::StrCat("memory socket: send: ", std::strerror(errno)));
  }
  absl::StatusOr<PassedMessage> reply = ReceiveFds(connection.get());
  if (request.size() > kMaxPassedPayload) {
    // Cut short by the size limit: the daemon closes the connection.
    if (!reply.ok() && absl::IsOutOfRange(reply.status())) {
      connection.Reset();
    } else {
      FuzzHarness::Fail(
          absl::StrCat("memory socket: a ", request.size(),
                       "-byte request did not close its connection: ", reply.status().ToString()));
    }
  } else {
    if (!reply.ok())
      FuzzHarness::Fail(absl::StrCat("memory socket: no reply: ", reply.status().ToString()));
    uint64_t size = 0;
    const absl::Status answer = ParseMemoryReply(reply->payload, &size);
    switch (answer.code()) {
      case absl::StatusCode::kUnknown:
      case absl::StatusCode::kInternal:
      case absl::StatusCode::kUnimplemented:
      case absl::StatusCode::kDataLoss:
        FuzzHarness::Fail(absl::StrCat("memory socket: request '", absl::CHexEscape(request),
                                       "' got ", answer.ToString(), " (reply '",
                                       absl::CHexEscape(reply->payload), "')"));
      default:
        break;
    }
    if (reply->fds.size() != (answer.ok() ? 1u : 0u)) {
      FuzzHarness::Fail(absl::StrCat("memory socket: reply '", reply->payload, "' came with ",
                                     reply->fds.size(), " descriptors"));
    }
  }
  harness.FinishInput();
}

void WriteSeeds(const std::string& dir) {
  std::filesystem::create_directories(dir);
  const std::string key(kMemoryFileKeyChars, 'b');
  const std::string seeds[] = {
      std::string(1, '\0') + "gmxmem1 1:00 " + key,
      std::string(1, '\1') + key,
      std::string(1, '\1') + key + " extra",
      std::string(1, '\2') + "1:0123456789abcdef0123456789abcdef",
      std::string(1, '\0') + "hello",
  };
  int n = 0;
  for (const std::string& seed : seeds) {
    std::ofstream file(absl::StrCat(dir, "/seed-", n++), std::ios::binary | std::ios::trunc);
    file << seed;
    if (!file.flush()) FuzzHarness::Fail(absl::StrCat("cannot write seeds into ", dir));
  }
}

}  // namespace
}  // namespace gpumux::fuzz

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  for (int i = 1; i < *argc; ++i) {
    const absl::string_view arg = (*argv)[i];
    if (arg.substr(0, gpumux::fuzz::kWriteSeedsFlag.size()) == gpumux::fuzz::kWriteSeedsFlag) {
      gpumux::fuzz::WriteSeeds(std::string(arg.substr(gpumux::fuzz::kWriteSeedsFlag.size())));
      exit(0);
    }
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  gpumux::fuzz::TestOneInput(absl::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
