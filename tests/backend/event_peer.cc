// event_peer: records, completes, queries and waits on host-backend
// interprocess events from a separate process, as a client does, through
// gpumux/common/host_ipc_event.h alone. event_peer.h describes the protocol.

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <utility>

#include "absl/strings/numbers.h"
#include "gpumux/common/host_ipc_event.h"
#include "tests/backend/event_peer.h"
#include "tests/backend/segment_peer.h"

namespace {

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string Check(int fd, uint64_t size, uint32_t seed) {
  void* mapped = mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  if (mapped == MAP_FAILED) return "check cannot-map";
  const auto* bytes = static_cast<const uint8_t*>(mapped);
  std::string result = "check ok";
  for (uint64_t i = 0; i < size; ++i) {
    if (bytes[i] != gpumux::testing::PeerPatternByte(i, seed)) {
      result = "check bad " + std::to_string(i);
      break;
    }
  }
  munmap(mapped, size);
  return result;
}

void Reply(const std::string& line) {
  std::cout << line << std::endl;  // flushes: the test waits for each line
}

int Serve(gpumux::HostIpcEvent& event) {
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    std::string command;
    in >> command;
    if (command == "record") {
      Reply("recorded " + std::to_string(event.Record()));
    } else if (command == "complete") {
      uint64_t generation = 0;
      in >> generation;
      event.Complete(generation, NowNs());
      Reply("completed");
    } else if (command == "query") {
      Reply(std::string("query ") + (event.Query() ? "1" : "0"));
    } else if (command == "wait") {
      const uint64_t generation = event.recorded();
      event.Wait(generation);
      Reply("waited " + std::to_string(generation));
    } else if (command == "check") {
      int fd = -1;
      uint64_t size = 0;
      uint32_t seed = 0;
      in >> fd >> size >> seed;
      Reply(Check(fd, size, seed));
    } else if (command == "exit") {
      break;
    } else {
      Reply("error unknown command");
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int fd = -1;
  if (argc != 3 || std::strcmp(argv[1], "open") != 0 || !absl::SimpleAtoi(argv[2], &fd) || fd < 0) {
    std::fprintf(stderr, "usage: event_peer open <descriptor>\n");
    return gpumux::testing::kEventPeerUsage;
  }
  absl::StatusOr<gpumux::SealedMemory> memory =
      gpumux::SealedMemory::Adopt(gpumux::UniqueFd(fd), gpumux::kHostIpcEventFileBytes);
  absl::StatusOr<std::unique_ptr<gpumux::HostIpcEvent>> event =
      memory.ok() ? gpumux::HostIpcEvent::Adopt(*std::move(memory), "event_peer")
                  : absl::StatusOr<std::unique_ptr<gpumux::HostIpcEvent>>(memory.status());
  if (!event.ok()) {
    Reply("error " + event.status().ToString());
    return gpumux::testing::kEventPeerCannotOpen;
  }
  Reply("opened");
  return Serve(**event);
}
