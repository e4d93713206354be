#pragma once

// A small streaming JSON writer for the CLI's --json output: objects, arrays,
// strings (escaped), integers, doubles and booleans, with 1-space indentation
// as Python's json.dumps(indent=1) prints. Not thread-safe.

#include <cstdint>
#include <string>
#include <vector>
#include "absl/strings/string_view.h"

namespace gpumux {

class JsonWriter {
 public:
  void BeginObject();
  void EndObject();
  void BeginArray();
  void EndArray();
  // Inside an object: the next value's key.
  void Key(absl::string_view key);
  void String(absl::string_view value);
  void Int(int64_t value);
  void Uint(uint64_t value);
  // Shortest round-trip text, ".0" on integral values; NaN and infinities as null.
  void Double(double value);
  void Bool(bool value);

  const std::string& str() const { return out_; }

 private:
  void BeforeValue();
  void Newline();
  void WriteEscaped(absl::string_view value);

  struct Level {
    bool is_object;
    int count;
  };
  std::string out_;
  std::vector<Level> levels_;
  bool after_key_ = false;
};

}  // namespace gpumux
