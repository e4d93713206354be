#pragma once

// HostBackend: emulated devices in host memory for machines without a GPU.
// A segment is a POSIX shared-memory object (shm_open + ftruncate, so it
// starts zero-filled) that another process maps by the name in its handle;
// releasing it unlinks the object. Device addresses come from a per-device
// emulated address range, handed out first-fit with 2 MiB alignment so that
// released ranges are reused as cudaMalloc tends to. Thread-safe.

#include "absl/strings/string_view.h"
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "server/backend/device_backend.h"

namespace gpumux {

class HostBackend final : public DeviceBackend {
 public:
  struct Options {
    int device_count = 2;
    uint64_t device_memory = uint64_t{8} << 30;
    // Prefix of shared-memory object names; a unique per-process part and a
    // random suffix are appended.
    std::string shm_prefix = "/gpumux";
  };

  // Fails with INVALID_ARGUMENT for device_count outside [1, 1024],
  // device_memory outside [2 MiB, 4 TiB] (each device's emulated address span),
  // or a shm_prefix that is not '/' plus 1 to 127 characters without '/'. Logs
  // a warning (no error) when the devices together exceed /dev/shm's free
  // space: clients touching memory beyond it would get SIGBUS.
  static absl::StatusOr<std::unique_ptr<HostBackend>> Create(const Options& options);
  // Unlinks every segment still held.
  ~HostBackend() override;

  absl::string_view name() const override { return "host"; }
  int device_count() const override { return static_cast<int>(devices_.size()); }
  const DeviceInfo& device_info(DeviceIndex device) const override;
  uint64_t FreeMemory(DeviceIndex device) const override;
  absl::StatusOr<BackendSegment> AllocateSegment(DeviceIndex device, uint64_t size) override;
  absl::Status ReleaseSegment(DeviceIndex device, uint64_t address) override;
  absl::Status Synchronize(DeviceIndex device) override;

 private:
  struct Device {
    DeviceInfo info;
    uint64_t base = 0;  // first emulated address
    mutable absl::Mutex mu;
    uint64_t used ABSL_GUARDED_BY(mu) = 0;
    // Free address ranges: start -> length.
    std::map<uint64_t, uint64_t> free_ranges ABSL_GUARDED_BY(mu);
    // Live segments: address -> (size, shm name).
    absl::flat_hash_map<uint64_t, std::pair<uint64_t, std::string>> segments ABSL_GUARDED_BY(mu);
    uint64_t next_serial ABSL_GUARDED_BY(mu) = 0;
  };

  explicit HostBackend(const Options& options);

  Options options_;
  std::string name_stem_;  // options_.shm_prefix + "-<pid>-<random>"
  std::vector<std::unique_ptr<Device>> devices_;
};

}  // namespace gpumux
