// gpumux_hold_session SOCKET NAME TENANT POD BYTES: a client that opens a
// session (client NAME, tenant TENANT, label pod=POD), allocates BYTES on
// device 0, creates a stream and an event, tries one allocation larger than
// the device (an OOM), prints "ready <session id>" and holds it all until its
// stdin closes; then it frees and ends its session. Killed instead, it
// leaves the daemon to reclaim what it held. For the shell tests of the
// HTTP listener (prometheus_test.sh).

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>

#include "gpumux/client.h"
#include "gpumux/device_buffer.h"
#include "gpumux/memory.h"

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: gpumux_hold_session SOCKET NAME TENANT POD BYTES\n");
    return 2;
  }
  gpumux::ClientOptions options;
  options.client_name = argv[2];
  options.tenant = argv[3];
  options.labels = {{"pod", argv[4]}, {"namespace", "default"}};
  absl::StatusOr<std::unique_ptr<gpumux::Client>> client =
      gpumux::Client::Connect(argv[1], options);
  if (!client.ok()) {
    std::cerr << "connect: " << client.status() << "\n";
    return 1;
  }
  absl::StatusOr<gpumux::DeviceBuffer> buffer =
      gpumux::memory::Allocate(*(*client), std::strtoull(argv[5], nullptr, 10));
  absl::StatusOr<gpumux::Stream> stream = (*client)->CreateStream(gpumux::DeviceIndex(0));
  absl::StatusOr<gpumux::Event> event = (*client)->CreateEvent(gpumux::DeviceIndex(0));
  if (!buffer.ok() || !stream.ok() || !event.ok()) {
    std::cerr << "allocate: " << buffer.status() << " stream: " << stream.status()
              << " event: " << event.status() << "\n";
    return 1;
  }
  // More than is free, and less than the device holds: an OOM (more than
  // the device holds is INVALID_ARGUMENT, as PyTorch's own check says).
  absl::StatusOr<gpumux::DeviceProperties> properties =
      (*client)->GetDeviceProperties(gpumux::DeviceIndex(0));
  if (!properties.ok()) {
    std::cerr << "device 0: " << properties.status() << "\n";
    return 1;
  }
  absl::StatusOr<gpumux::DeviceBuffer> oom =
      gpumux::memory::Allocate(*(*client), properties->total_memory - (uint64_t{1} << 20));
  if (oom.status().code() != absl::StatusCode::kResourceExhausted) {
    std::cerr << "an allocation over what is free: " << oom.status() << "\n";
    return 1;
  }
  std::cout << "ready " << (*client)->session_id().value() << std::endl;
  std::string line;
  while (std::getline(std::cin, line)) {
  }
  return 0;
}
