#pragma once

// gpumux_client_test_child (client_child_main.cc) as a real child process:
// its stdout is a pipe the test reads line by line. SIGKILLed and reaped on
// destruction unless it was waited for.

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/support/test_binary.h"

namespace gpumux::testing {

class ClientChild {
 public:
  explicit ClientChild(std::vector<std::string> args) {
    int out[2];
    if (pipe(out) != 0) {
      ADD_FAILURE() << "pipe";
      return;
    }
    args.insert(args.begin(), TestBinary(std::string(GPUMUX_BINARY_DIR) +
                                         "/tests/client/gpumux_client_test_child"));
    std::vector<char*> argv;
    for (std::string& arg : args) argv.push_back(arg.data());
    argv.push_back(nullptr);
    pid_ = fork();
    if (pid_ == 0) {
      dup2(out[1], 1);
      close(out[0]);
      close(out[1]);
      execv(argv[0], argv.data());
      _exit(127);
    }
    close(out[1]);
    from_child_ = fdopen(out[0], "r");
  }
  ~ClientChild() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      Wait();
    }
    if (from_child_ != nullptr) fclose(from_child_);
  }
  ClientChild(const ClientChild&) = delete;
  ClientChild& operator=(const ClientChild&) = delete;

  // The next line without its newline; "" at the end of the output.
  std::string ReadLine() {
    char line[512];
    if (from_child_ == nullptr || std::fgets(line, sizeof(line), from_child_) == nullptr) return "";
    std::string text(line);
    if (!text.empty() && text.back() == '\n') text.pop_back();
    return text;
  }
  // The exit code, or 128 + the signal.
  int Wait() {
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

 private:
  pid_t pid_ = -1;
  FILE* from_child_ = nullptr;
};

}  // namespace gpumux::testing
