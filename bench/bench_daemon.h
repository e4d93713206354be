#pragma once

// A gpumuxd child process on a temporary socket, for benchmarks that need a
// real daemon: started by the constructor, SIGTERMed and reaped by the
// destructor, its directory removed.

#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

namespace gpumux::bench {

// The executable `name` next to this one (a bundle's bin/), else in the
// build tree's `build_dir` (bench/../BUILD_DIR/NAME).
inline std::string ToolPath(const std::string& name, const std::filesystem::path& build_dir) {
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe");
  if (std::filesystem::exists(self.parent_path() / name))
    return (self.parent_path() / name).string();
  return (self.parent_path().parent_path() / build_dir / name).string();
}

// gpumuxd next to this executable, else build/server/gpumuxd.
inline std::string DefaultDaemonPath() { return ToolPath("gpumuxd", "server"); }

class BenchDaemon {
 public:
  // Runs `binary --socket=<temp>/gpumux.sock --log-level=warn <args>` and
  // waits up to 30 s (a CUDA daemon loads its contexts first) until the
  // socket accepts connections.
  BenchDaemon(const std::string& binary, const std::vector<std::string>& args) {
    char pattern[] = "/tmp/gpumux-bench-XXXXXX";
    dir_ = mkdtemp(pattern);
    socket_ = dir_ + "/gpumux.sock";
    std::vector<std::string> argv_storage = {binary, "--socket=" + socket_, "--log-level=warn"};
    argv_storage.insert(argv_storage.end(), args.begin(), args.end());
    pid_ = fork();
    if (pid_ == 0) {
      std::vector<char*> argv;
      for (std::string& arg : argv_storage) argv.push_back(arg.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    for (int i = 0; i < 6000 && !Accepts(socket_); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  ~BenchDaemon() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      waitpid(pid_, nullptr, 0);
    }
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  BenchDaemon(const BenchDaemon&) = delete;
  BenchDaemon& operator=(const BenchDaemon&) = delete;

  std::string address() const { return "unix://" + socket_; }
  pid_t pid() const { return pid_; }

 private:
  // Whether something listens on the Unix socket at `path`: the file
  // appears at bind(), a moment before listen(), and a connection in
  // between is refused.
  static bool Accepts(const std::string& path) {
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    if (path.size() >= sizeof(address.sun_path)) return false;
    path.copy(address.sun_path, path.size());
    const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return false;
    const bool accepted =
        connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) == 0;
    close(fd);
    return accepted;
  }

  std::string dir_;
  std::string socket_;
  pid_t pid_ = -1;
};

}  // namespace gpumux::bench
