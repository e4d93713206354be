#pragma once

// The protocol between the host backend tests and event_peer, a helper
// program that uses interprocess events the way a client does: through
// gpumux/common/host_ipc_event.h only, with no daemon. The test starts it with pipes
// on its stdin and stdout (EventPeer below), handing it memory files as
// inherited descriptors (as a client receives them from the memory socket),
// and drives it line by line:
//
//   event_peer open <descriptor> adopts the event in that memory file, prints
//                                "opened" (or "error <msg>" and exits
//                                kEventPeerCannotOpen)
//
// then answers commands, one line each:
//   record                       -> "recorded <generation>"
//   complete <generation>        -> "completed"
//   query                        -> "query 0|1"
//   wait                         -> "waited <generation>" once the latest
//                                   record (as of the command) completed
//   check <descriptor> <size> <seed>
//                                -> "check ok" when the bytes of the segment
//                                   in that memory file are
//                                   PeerPatternByte(i, seed), else "check bad <i>"
//   exit (or end of input)       -> exits 0

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "tests/support/test_binary.h"

namespace gpumux::testing {

inline constexpr int kEventPeerUsage = 2;
inline constexpr int kEventPeerCannotOpen = 3;

#ifdef GPUMUX_EVENT_PEER
// A running event_peer with pipes to its stdin and stdout.
class EventPeer {
 public:
  // Starts event_peer with `args`; it inherits the descriptors `inherit`.
  explicit EventPeer(std::vector<std::string> args, std::vector<int> inherit = {}) {
    args.insert(args.begin(), TestBinary(GPUMUX_EVENT_PEER));
    int to_child[2];
    int from_child[2];
    if (pipe2(to_child, O_CLOEXEC) != 0 || pipe2(from_child, O_CLOEXEC) != 0) return;
    std::vector<char*> argv;
    for (std::string& arg : args) argv.push_back(arg.data());
    argv.push_back(nullptr);
    pid_ = fork();
    if (pid_ == 0) {
      dup2(to_child[0], 0);
      dup2(from_child[1], 1);
      for (int fd : inherit) fcntl(fd, F_SETFD, 0);  // the child's copies only
      execv(argv[0], argv.data());
      _exit(127);
    }
    close(to_child[0]);
    close(from_child[1]);
    in_ = to_child[1];
    out_ = from_child[0];
  }
  ~EventPeer() {
    if (in_ >= 0) close(in_);
    if (out_ >= 0) close(out_);
    if (pid_ > 0 && !exit_code_.has_value()) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  EventPeer(const EventPeer&) = delete;
  EventPeer& operator=(const EventPeer&) = delete;

  bool started() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }

  bool Send(const std::string& line) {
    const std::string text = line + "\n";
    return write(in_, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  }

  // The next line the peer prints, or nullopt when none comes within `timeout`.
  std::optional<std::string> ReadLine(std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
      const size_t newline = buffer_.find('\n');
      if (newline != std::string::npos) {
        std::string line = buffer_.substr(0, newline);
        buffer_.erase(0, newline + 1);
        return line;
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return std::nullopt;
      pollfd fd{out_, POLLIN, 0};
      if (poll(&fd, 1, static_cast<int>(left.count())) <= 0) continue;
      char chunk[256];
      const ssize_t n = read(out_, chunk, sizeof(chunk));
      if (n <= 0) return std::nullopt;  // the peer exited
      buffer_.append(chunk, static_cast<size_t>(n));
    }
  }

  // SIGKILLs it mid-work, as a client gets killed, and reaps it: until then
  // it would be a zombie, which still counts as a live process.
  void Kill() {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    exit_code_ = 128 + SIGKILL;
  }

  // Closes its stdin and returns its exit code (-1 when it did not exit).
  int Finish() {
    if (in_ >= 0) close(in_);
    in_ = -1;
    int wstatus = 0;
    if (waitpid(pid_, &wstatus, 0) != pid_ || !WIFEXITED(wstatus)) return -1;
    exit_code_ = WEXITSTATUS(wstatus);
    return *exit_code_;
  }

 private:
  pid_t pid_ = -1;
  int in_ = -1;
  int out_ = -1;
  std::string buffer_;
  std::optional<int> exit_code_;
};
#endif  // GPUMUX_EVENT_PEER

}  // namespace gpumux::testing
