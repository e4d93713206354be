// gpumux's client example, built against an installed libgpumux: allocates
// device memory from gpumuxd, writes it, shares it with a second process
// that imports and reads it, checks the session's memory stats and prints
// the daemon's memory summary. --hold then keeps the session and its
// allocation until SIGTERM or SIGINT, so operators see it (gpumux top,
// /metrics): the Kubernetes example client runs it that way.
//
//   client_example [ADDRESS] [--hold]         (default: $GPUMUX_ADDRESS or
//                                              unix:///run/gpumux/gpumux.sock)
//   client_example ADDRESS --import TOKEN     (the second process)

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>

#include <gpumux/client.h>
#include <gpumux/copy.h>
#include <gpumux/memory.h>

extern char** environ;

namespace {

constexpr char kMessage[] = "hello from gpumux";

int Fail(const char* what, const absl::Status& status) {
  std::fprintf(stderr, "client_example: %s: %s\n", what, status.ToString().c_str());
  return 1;
}

// The second process: imports the shared buffer and reads it back.
int Import(const std::string& address, const std::string& token) {
  absl::StatusOr<std::unique_ptr<gpumux::Client>> client = gpumux::Client::Connect(address);
  if (!client.ok()) return Fail("connect", client.status());
  absl::StatusOr<gpumux::DeviceBuffer> buffer = gpumux::memory::Import(**client, token);
  if (!buffer.ok()) return Fail("import", buffer.status());
  char text[sizeof(kMessage)] = {};
  absl::StatusOr<gpumux::Event> copied =
      gpumux::copy::DeviceToHost(**client, text, *buffer, 0, sizeof(text));
  if (!copied.ok()) return Fail("copy to host", copied.status());
  std::printf("imported %llu bytes in session %llu: \"%s\"\n",
              static_cast<unsigned long long>(buffer->size()),
              static_cast<unsigned long long>((*client)->session_id().value()), text);
  return std::strcmp(text, kMessage) == 0 ? 0 : 1;
}

// Runs this program again as the importing process; its exit status.
int RunImporter(const std::string& address, const std::string& token) {
  // The program's own path, not /proc/self/exe, so that the second
  // process's name (the daemon's client name) is this program's too.
  char self[4096];
  const ssize_t length = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (length <= 0) {
    std::fprintf(stderr, "client_example: readlink /proc/self/exe: %s\n", std::strerror(errno));
    return 1;
  }
  self[length] = '\0';
  char* argv[] = {self, const_cast<char*>(address.c_str()), const_cast<char*>("--import"),
                  const_cast<char*>(token.c_str()), nullptr};
  std::fflush(stdout);
  pid_t pid;
  if (int error = posix_spawn(&pid, self, nullptr, nullptr, argv, environ); error != 0) {
    std::fprintf(stderr, "client_example: posix_spawn: %s\n", std::strerror(error));
    return 1;
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

// torch.cuda.memory_stats(0) of this session: the 1 MiB allocation is there.
int CheckStats(gpumux::Client& client) {
  absl::StatusOr<std::map<std::string, int64_t>> stats =
      gpumux::memory::MemoryStats(client, gpumux::DeviceIndex(0));
  if (!stats.ok()) return Fail("memory stats", stats.status());
  const int64_t allocated = (*stats)["allocated_bytes.all.current"];
  const int64_t reserved = (*stats)["reserved_bytes.all.current"];
  std::printf("memory stats: allocated_bytes.all.current=%lld reserved_bytes.all.current=%lld\n",
              static_cast<long long>(allocated), static_cast<long long>(reserved));
  // A shareable allocation owns its segment, whole 2 MiB pages of it: its
  // block is the segment, so it counts 2 MiB here (an unshared 1 MiB
  // allocation would count 1 MiB, as in PyTorch).
  if (allocated < (1 << 20) || reserved < allocated) {
    std::fprintf(stderr, "client_example: the stats do not show the 1 MiB allocation\n");
    return 1;
  }
  return 0;
}

// Blocks until SIGTERM or SIGINT.
void Hold() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::printf("holding the session until SIGTERM\n");
  std::fflush(stdout);
  int signal = 0;
  sigwait(&signals, &signal);
}

}  // namespace

int main(int argc, char** argv) {
  bool hold = false;
  if (argc > 1 && std::strcmp(argv[argc - 1], "--hold") == 0) {
    hold = true;
    --argc;
  }
  const std::string address = argc > 1 ? argv[1] : gpumux::DefaultAddress();
  if (argc == 4 && std::strcmp(argv[2], "--import") == 0) return Import(address, argv[3]);

  absl::StatusOr<std::unique_ptr<gpumux::Client>> client = gpumux::Client::Connect(address);
  if (!client.ok()) return Fail("connect", client.status());
  std::printf("session %llu on gpumuxd %s (%s backend)\n",
              static_cast<unsigned long long>((*client)->session_id().value()),
              (*client)->daemon_version().c_str(), (*client)->backend().c_str());

  // torch.empty(1 << 20, dtype=torch.uint8, device="cuda:0"), shareable.
  gpumux::AllocateOptions options;
  options.shareable = true;
  absl::StatusOr<gpumux::DeviceBuffer> buffer =
      gpumux::memory::Allocate(**client, 1 << 20, gpumux::DeviceIndex(0), options);
  if (!buffer.ok()) return Fail("allocate", buffer.status());
  absl::StatusOr<gpumux::Event> written =
      gpumux::copy::HostToDevice(**client, *buffer, 0, kMessage, sizeof(kMessage));
  if (!written.ok()) return Fail("copy to device", written.status());
  if (absl::Status synced = (*client)->Synchronize(gpumux::DeviceIndex(0)); !synced.ok()) {
    return Fail("synchronize", synced);
  }

  // A single-use token the second process redeems for its own reference.
  absl::StatusOr<std::string> token = gpumux::memory::Share(**client, *buffer);
  if (!token.ok()) return Fail("share", token.status());
  if (int code = RunImporter(address, *token); code != 0) {
    std::fprintf(stderr, "client_example: the importing process failed (exit %d)\n", code);
    return 1;
  }

  if (int code = CheckStats(**client); code != 0) return code;

  absl::StatusOr<std::string> summary =
      gpumux::memory::MemorySummary(**client, gpumux::DeviceIndex(0));
  if (!summary.ok()) return Fail("memory summary", summary.status());
  std::printf("%s", summary->c_str());
  if (hold) Hold();
  return 0;
}
