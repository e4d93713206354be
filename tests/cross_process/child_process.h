#pragma once

// gpumux_test_child (child_main.cc) as a real child process with pipes to
// its stdin and stdout; SIGKILLed and reaped on destruction.

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "tests/support/test_binary.h"

namespace gpumux::testing {

inline const std::string kChild =
    TestBinary(std::string(GPUMUX_BINARY_DIR) + "/tests/cross_process/gpumux_test_child");

// A child process with pipes to its stdin and stdout.
class Child {
 public:
  explicit Child(std::vector<std::string> args) : Child(kChild, std::move(args)) {}
  // Runs `program` instead of gpumux_test_child.
  Child(const std::string& program, std::vector<std::string> args) {
    int in[2], out[2];
    if (pipe(in) != 0 || pipe(out) != 0) ADD_FAILURE() << "pipe";
    pid_ = fork();
    if (pid_ == 0) {
      dup2(in[0], 0);
      dup2(out[1], 1);
      close(in[1]);
      close(out[0]);
      std::vector<char*> argv;
      args.insert(args.begin(), program);
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    close(in[0]);
    close(out[1]);
    to_child_ = fdopen(in[1], "w");
    from_child_ = fdopen(out[0], "r");
  }
  ~Child() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      Wait();
    }
    if (to_child_ != nullptr) fclose(to_child_);
    if (from_child_ != nullptr) fclose(from_child_);
  }
  // The next line without its newline, however long; "" at the end.
  std::string ReadLine() {
    std::string s;
    char part[512];
    while (std::fgets(part, sizeof(part), from_child_) != nullptr) {
      s += part;
      if (s.back() == '\n') {
        s.pop_back();
        break;
      }
    }
    return s;
  }
  void WriteLine(const std::string& line) {
    std::fprintf(to_child_, "%s\n", line.c_str());
    std::fflush(to_child_);
  }
  // The exit code, or 128 + signal.
  int Wait() {
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  FILE* to_child_ = nullptr;
  FILE* from_child_ = nullptr;
};

}  // namespace gpumux::testing
