// gpumux: the operator's command line for gpumuxd (see cli.h).

#include <iostream>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "client/cli/cli.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

int main(int argc, char** argv) {
  // Library warnings must not mix into --json output on stdout.
  spdlog::set_default_logger(spdlog::stderr_color_mt("gpumux"));
  // Debian's Abseil checks lock order on every Mutex acquisition; `replay`
  // measures the allocator's speed, not that check.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  return gpumux::RunCli(std::vector<std::string>(argv + 1, argv + argc), std::cout, std::cerr);
}
