#include "client/c_abi/last_error.h"

#include <string>

namespace gpumux::c_abi {
namespace {

struct LastError {
  std::string text;
  int code = 0;
};

thread_local LastError last_error;

}  // namespace

void ClearLastError() {
  last_error.text.clear();  // keeps the capacity: no allocation per call
  last_error.code = 0;
}

void SetLastError(const absl::Status& status) {
  last_error.text.assign(status.message().data(), status.message().size());
  last_error.code = static_cast<int>(status.code());
}

const char* LastErrorText() { return last_error.text.c_str(); }

int LastErrorCode() { return last_error.code; }

}  // namespace gpumux::c_abi
