#pragma once

// A command run for a test, through the shell or as another user, and its
// exit code and its stdout and stderr together.

#include <grp.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <optional>
#include <string>
#include <vector>

namespace gpumux::testing {

struct ShellRun {
  int exit_code = -1;  // -1: it did not start, or did not exit normally
  std::string output;
};

inline ShellRun RunShell(const std::string& command) {
  ShellRun run;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return run;
  std::array<char, 4096> buffer;
  size_t n;
  while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0)
    run.output.append(buffer.data(), n);
  const int status = pclose(pipe);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

// `argv` (argv[0] the program's path), without a shell; with `as`, under
// that uid, gid and only that group (the test must be root). Exit code 126:
// it could not become `as`; 127: it could not run; 128 + N: killed by N.
inline ShellRun RunProgram(std::vector<std::string> argv, std::optional<uid_t> as = std::nullopt) {
  ShellRun run;
  int out[2];
  if (pipe(out) != 0) return run;
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(out[1], 1);
    dup2(out[1], 2);
    if (as.has_value()) {
      const gid_t group = *as;
      if (setgroups(1, &group) != 0 || setgid(*as) != 0 || setuid(*as) != 0) _exit(126);
    }
    std::vector<char*> args;
    for (std::string& arg : argv) args.push_back(arg.data());
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  close(out[1]);
  std::array<char, 4096> buffer;
  ssize_t n;
  while ((n = read(out[0], buffer.data(), buffer.size())) > 0)
    run.output.append(buffer.data(), static_cast<size_t>(n));
  close(out[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return run;
}

}  // namespace gpumux::testing
