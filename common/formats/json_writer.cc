#include "common/formats/json_writer.h"
#include "absl/strings/string_view.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <string_view>

#include "absl/strings/str_cat.h"

namespace gpumux {

void JsonWriter::Newline() {
  out_.push_back('\n');
  out_.append(levels_.size(), ' ');
}

void JsonWriter::BeforeValue() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (levels_.empty()) return;
  if (levels_.back().count++ > 0) out_.push_back(',');
  Newline();
}

void JsonWriter::BeginObject() {
  BeforeValue();
  out_.push_back('{');
  levels_.push_back({true, 0});
}

void JsonWriter::EndObject() {
  bool empty = levels_.back().count == 0;
  levels_.pop_back();
  if (!empty) Newline();
  out_.push_back('}');
}

void JsonWriter::BeginArray() {
  BeforeValue();
  out_.push_back('[');
  levels_.push_back({false, 0});
}

void JsonWriter::EndArray() {
  bool empty = levels_.back().count == 0;
  levels_.pop_back();
  if (!empty) Newline();
  out_.push_back(']');
}

void JsonWriter::Key(absl::string_view key) {
  BeforeValue();
  WriteEscaped(key);
  out_.append(": ");
  after_key_ = true;
}

void JsonWriter::String(absl::string_view value) {
  BeforeValue();
  WriteEscaped(value);
}

void JsonWriter::WriteEscaped(absl::string_view value) {
  out_.push_back('"');
  for (unsigned char c : value) {
    switch (c) {
      case '"':
        out_.append("\\\"");
        break;
      case '\\':
        out_.append("\\\\");
        break;
      case '\n':
        out_.append("\\n");
        break;
      case '\r':
        out_.append("\\r");
        break;
      case '\t':
        out_.append("\\t");
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out_.append(buf);
        } else {
          out_.push_back(static_cast<char>(c));
        }
    }
  }
  out_.push_back('"');
}

void JsonWriter::Int(int64_t value) {
  BeforeValue();
  absl::StrAppend(&out_, value);
}

void JsonWriter::Uint(uint64_t value) {
  BeforeValue();
  absl::StrAppend(&out_, value);
}

void JsonWriter::Double(double value) {
  BeforeValue();
  if (!std::isfinite(value)) {
    out_.append("null");
    return;
  }
  // Shortest text that reads back as the same double ("0.1", not %.17g's
  // "0.10000000000000001"), with ".0" on integral values so that readers such
  // as Python's json keep a float, as json.dumps prints them.
  char buf[32];
  char* end = std::to_chars(buf, buf + sizeof(buf), value).ptr;
  std::string_view text(buf, static_cast<size_t>(end - buf));
  out_.append(text);
  if (text.find_first_of(".e") == std::string_view::npos) out_.append(".0");
}

void JsonWriter::Bool(bool value) {
  BeforeValue();
  out_.append(value ? "true" : "false");
}

}  // namespace gpumux
