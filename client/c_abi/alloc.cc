// gpumux/alloc.h's C functions: each clears the thread's last error, runs
// one ProcessAllocator call and turns its status into NULL (or -1) and the
// last error.

#include "gpumux/alloc.h"

#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "client/c_abi/last_error.h"
#include "client/c_abi/process_allocator.h"

using gpumux::c_abi::ClearLastError;
using gpumux::c_abi::ProcessAllocator;
using gpumux::c_abi::SetLastError;

namespace {

// Records a failure; returns whether `status` was OK.
bool Check(const absl::Status& status) {
  if (status.ok()) return true;
  SetLastError(status);
  return false;
}

template <typename T>
T* ValueOrNull(const absl::StatusOr<T*>& result) {
  if (!Check(result.status())) return nullptr;
  return *result;
}

// Writes `text` into `buf` as snprintf does (at most len - 1 characters
// and a NUL; nothing for len 0) and returns its full length; -1 and the
// last error when it failed, or does not fit an int.
int WriteText(const char* function, const absl::StatusOr<std::string>& text, char* buf,
              size_t len) {
  if (!Check(text.status())) return -1;
  if (text->size() > static_cast<size_t>(std::numeric_limits<int>::max())) {
    Check(absl::OutOfRangeError(absl::StrCat(function, ": the text takes ", text->size(),
                                             " bytes, more than an int counts")));
    return -1;
  }
  if (len > 0) {
    if (buf == nullptr) {
      Check(absl::InvalidArgumentError(
          absl::StrCat(function, ": buf is NULL but len is ", len, "; pass len 0 to measure")));
      return -1;
    }
    const size_t n = text->size() < len - 1 ? text->size() : len - 1;
    std::memcpy(buf, text->data(), n);
    buf[n] = '\0';
  }
  return static_cast<int>(text->size());
}

}  // namespace

extern "C" {

void* gpumux_malloc(size_t size, int device, void* stream) {
  ClearLastError();
  return ValueOrNull(ProcessAllocator::Get().Malloc(size, device, stream));
}

void gpumux_free(void* ptr, size_t size, int device, void* stream) {
  ClearLastError();
  Check(ProcessAllocator::Get().Free(ptr, size, device, stream));
}

void gpumux_init(int device_count) {
  ClearLastError();
  Check(ProcessAllocator::Get().Init(device_count));
}

void gpumux_empty_cache(void) {
  ClearLastError();
  Check(ProcessAllocator::Get().EmptyCache());
}

void gpumux_set_memory_fraction(double fraction, int device) {
  ClearLastError();
  Check(ProcessAllocator::Get().SetMemoryFraction(fraction, device));
}

void* gpumux_base_allocation(void* ptr, size_t* size) {
  ClearLastError();
  return ValueOrNull(ProcessAllocator::Get().BaseAllocation(ptr, size));
}

void gpumux_record_stream(void* ptr, void* stream) {
  ClearLastError();
  Check(ProcessAllocator::Get().RecordStream(ptr, stream));
}

const char* gpumux_last_error(void) { return gpumux::c_abi::LastErrorText(); }

int gpumux_last_error_code(void) { return gpumux::c_abi::LastErrorCode(); }

int gpumux_memory_stats_json(int device, char* buf, size_t len) {
  ClearLastError();
  return WriteText("gpumux_memory_stats_json", ProcessAllocator::Get().MemoryStatsJson(device), buf,
                   len);
}

int gpumux_memory_snapshot_json(char* buf, size_t len) {
  ClearLastError();
  return WriteText("gpumux_memory_snapshot_json", ProcessAllocator::Get().MemorySnapshotJson(), buf,
                   len);
}

int gpumux_reset_peak_memory_stats(int device) {
  ClearLastError();
  return Check(ProcessAllocator::Get().ResetPeakStats(device)) ? 0 : -1;
}

int gpumux_reset_accumulated_memory_stats(int device) {
  ClearLastError();
  return Check(ProcessAllocator::Get().ResetAccumulatedStats(device)) ? 0 : -1;
}

const char* gpumux_backend(void) {
  ClearLastError();
  absl::StatusOr<const char*> backend = ProcessAllocator::Get().Backend();
  if (!Check(backend.status())) return nullptr;
  return *backend;
}

}  // extern "C"
