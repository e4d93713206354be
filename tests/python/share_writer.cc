// For the Python wire-API test: allocates shareable memory through libgpumux,
// fills it with the seeded test pattern, prints the share token and holds the
// allocation until standard input closes.
//
// usage: gpumux_share_writer ADDRESS SIZE SEED

#include <cstdio>
#include <cstdlib>
#include <string>

#include "gpumux/client.h"
#include "gpumux/memory.h"
#include "tests/support/test_pattern.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s ADDRESS SIZE SEED\n", argv[0]);
    return 2;
  }
  auto client = gpumux::Client::Connect(argv[1], {.client_name = "share-writer"});
  if (!client.ok()) {
    std::fprintf(stderr, "connect: %s\n", client.status().ToString().c_str());
    return 1;
  }
  uint64_t size = std::strtoull(argv[2], nullptr, 10);
  auto buffer =
      gpumux::memory::Allocate(*(*client), size, gpumux::DeviceIndex(0), {.shareable = true});
  if (!buffer.ok()) {
    std::fprintf(stderr, "allocate: %s\n", buffer.status().ToString().c_str());
    return 1;
  }
  gpumux::testing::FillPattern(buffer->data(), size, std::strtoull(argv[3], nullptr, 10));
  auto token = gpumux::memory::Share(*(*client), *buffer);
  if (!token.ok()) {
    std::fprintf(stderr, "share: %s\n", token.status().ToString().c_str());
    return 1;
  }
  std::printf("%s\n", token->c_str());
  std::fflush(stdout);
  while (std::getchar() != EOF) {
  }
  return 0;
}
