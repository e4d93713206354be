#pragma once

// The `gpumux` command line: global flags (--address anywhere, --help), then
// one subcommand (see commands.h). main() is this plus process setup, so
// tests run the CLI in-process with their own streams.

#include <ostream>
#include <string>
#include <vector>

namespace gpumux {

// `args` excludes the program name. Returns the exit code: 0 done, 1 failed,
// 2 bad usage (the usage text goes to `err`).
int RunCli(std::vector<std::string> args, std::ostream& out, std::ostream& err);

// The global usage text.
const std::string& CliUsage();

}  // namespace gpumux
