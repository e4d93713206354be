#pragma once

// ProcessAllocator: what libgpumux_alloc's C functions (gpumux/alloc.h) run
// on. One per process, holding the process's gpumux::Client (connected on
// first use, in local allocation mode unless GPUMUX_ALLOCATION=daemon) and
// the DeviceBuffer behind every pointer handed out, keyed by the pointer.
// At process exit (atexit, registered once connected) it frees what is
// left and ends the session; calls after that fail FAILED_PRECONDITION,
// frees are ignored.
//
// Thread-safe: the client is published once through an atomic, the
// pointer table has its own mutex, held only to insert or take out.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "gpumux/client.h"
#include "gpumux/device_buffer.h"

namespace gpumux::c_abi {

class ProcessAllocator {
 public:
  // The process's instance, never destroyed (C callers may free during
  // exit, after static destructors ran).
  static ProcessAllocator& Get();

  // gpumux_init: connects if not yet connected. INVALID_ARGUMENT for a
  // negative count; FAILED_PRECONDITION when `device_count` exceeds the
  // daemon's; the connection's error otherwise.
  absl::Status Init(int device_count);
  // The contracts of gpumux/alloc.h's functions of the same names.
  absl::StatusOr<void*> Malloc(uint64_t size, int device, void* stream);
  absl::Status Free(void* ptr, uint64_t size, int device, void* stream);
  absl::Status EmptyCache();
  absl::Status SetMemoryFraction(double fraction, int device);
  // The segment's base; its size in *size.
  absl::StatusOr<void*> BaseAllocation(void* ptr, size_t* size);
  absl::Status RecordStream(void* ptr, void* stream);
  absl::StatusOr<std::string> MemoryStatsJson(int device);
  absl::StatusOr<std::string> MemorySnapshotJson();
  absl::Status ResetPeakStats(int device);
  absl::Status ResetAccumulatedStats(int device);
  // "cuda" or "host", as long as the process lives.
  absl::StatusOr<const char*> Backend();

  // Frees every live pointer and ends the session (the atexit handler).
  // Idempotent.
  void Shutdown();

 private:
  // One pointer handed out.
  struct Entry {
    DeviceBuffer buffer;
    // The stream gpumux_malloc was given: the block's pool in local
    // allocation mode.
    void* stream = nullptr;
    // A daemon-side block's (GPUMUX_ALLOCATION=daemon): the other streams
    // gpumux_record_stream named, each fenced at the free. A local block's
    // allocator keeps them itself.
    std::vector<void*> recorded_streams;
  };

  ProcessAllocator() = default;

  // The connected client, connecting first if need be.
  absl::StatusOr<Client*> Connected();
  absl::Status CheckDevice(absl::string_view function, int device) const;
  // `stream` used `entry`'s block (record_stream).
  absl::Status Record(Client& client, Entry& entry, void* stream);
  // Gives `entry`'s block back, its reuse ordered after the work queued on
  // its stream and on the streams recorded on it, without waiting for any.
  absl::Status Release(Client& client, Entry entry);

  // Serializes connecting, and Shutdown against it.
  absl::Mutex connect_mu_;
  std::unique_ptr<Client> client_ ABSL_GUARDED_BY(connect_mu_);
  // client_.get() once connected, null before and after Shutdown. Release
  // store after the client and device_count_ are set; acquire load in
  // Connected(), so a reader that sees it sees them.
  std::atomic<Client*> connected_{nullptr};
  int device_count_ = 0;  // written before connected_ is published
  bool cuda_backend_ = false;
  bool shut_down_ ABSL_GUARDED_BY(connect_mu_) = false;

  mutable absl::Mutex table_mu_;
  absl::flat_hash_map<void*, Entry> table_ ABSL_GUARDED_BY(table_mu_);
  // Set (under table_mu_) when Shutdown took the table: frees are ignored.
  bool table_closed_ ABSL_GUARDED_BY(table_mu_) = false;
};

}  // namespace gpumux::c_abi
