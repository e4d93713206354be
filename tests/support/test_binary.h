#pragma once

// Where a helper program a test starts lives. Tests compile in the build
// tree's path; in a release bundle (scripts/gpu-check) every executable sits
// in one bin/ directory instead, so when the compiled-in path does not exist
// the helper is looked up next to the running test.

#include <unistd.h>

#include <string>

namespace gpumux::testing {

inline std::string TestBinary(const std::string& compiled_path) {
  if (access(compiled_path.c_str(), X_OK) == 0) return compiled_path;
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return compiled_path;
  const std::string dir(self, static_cast<size_t>(n));
  const size_t dir_end = dir.rfind('/');
  const size_t name_start = compiled_path.rfind('/');
  const std::string name =
      name_start == std::string::npos ? compiled_path : compiled_path.substr(name_start + 1);
  return dir.substr(0, dir_end) + "/" + name;
}

// A file under the source tree's testdata/: $GPUMUX_TESTDATA/<name> when that
// is set (the bundle's copy), else GPUMUX_SOURCE_DIR/testdata/<name>.
inline std::string TestDataPath(const std::string& name) {
  if (const char* dir = getenv("GPUMUX_TESTDATA"); dir != nullptr && *dir != '\0') {
    return std::string(dir) + "/" + name;
  }
#ifdef GPUMUX_SOURCE_DIR
  return std::string(GPUMUX_SOURCE_DIR) + "/testdata/" + name;
#else
  return "testdata/" + name;
#endif
}

}  // namespace gpumux::testing
