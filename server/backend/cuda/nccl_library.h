#pragma once

// NcclLibrary: NCCL loaded at run time (dlopen), so that one gpumuxd binary
// runs where NCCL is installed (PyTorch's wheels carry libnccl.so.2, CUDA
// images have it) and where it is not (collectives then use peer copies and
// the reduction kernel), and the GPU check bundle need not carry NCCL's
// 200 MiB. Built only with CUDA and nccl.h; the functions' types come from
// nccl.h, so a library without one of them is refused at Load.

#include <memory>
#include <string>

#include <nccl.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gpumux {

class NcclLibrary {
 public:
  // dlopen(`path`; "libnccl.so.2", the loader's search path, when empty).
  // NOT_FOUND when it cannot be opened, FAILED_PRECONDITION when it lacks
  // a function gpumux calls or is older than 2.14 (nonblocking communicators).
  static absl::StatusOr<std::unique_ptr<NcclLibrary>> Load(const std::string& path);
  // The library stays loaded: NCCL's threads may outlive its communicators.
  ~NcclLibrary() = default;

  // "2.28.9".
  const std::string& version() const { return version_; }
  const std::string& path() const { return path_; }

  // OK for ncclSuccess, else "<what>: <ncclGetErrorString> (<last error>)"
  // with a code by kind: INVALID_ARGUMENT for invalid arguments and usage,
  // UNAVAILABLE for CUDA, system and remote errors (a device, a peer or the
  // network failed), INTERNAL otherwise. `comm` may be null.
  absl::Status Check(ncclResult_t result, ncclComm_t comm, absl::string_view what) const;

  decltype(&ncclGetErrorString) GetErrorString = nullptr;
  decltype(&ncclGetLastError) GetLastError = nullptr;
  decltype(&ncclGetVersion) GetVersion = nullptr;
  decltype(&ncclGetUniqueId) GetUniqueId = nullptr;
  decltype(&ncclCommInitAll) CommInitAll = nullptr;
  decltype(&ncclCommInitRankConfig) CommInitRankConfig = nullptr;
  decltype(&ncclCommDestroy) CommDestroy = nullptr;
  decltype(&ncclCommAbort) CommAbort = nullptr;
  decltype(&ncclCommGetAsyncError) CommGetAsyncError = nullptr;
  decltype(&ncclGroupStart) GroupStart = nullptr;
  decltype(&ncclGroupEnd) GroupEnd = nullptr;
  decltype(&ncclAllReduce) AllReduce = nullptr;
  decltype(&ncclBroadcast) Broadcast = nullptr;
  decltype(&ncclReduce) Reduce = nullptr;
  decltype(&ncclAllGather) AllGather = nullptr;
  decltype(&ncclReduceScatter) ReduceScatter = nullptr;

 private:
  NcclLibrary() = default;

  void* handle_ = nullptr;
  std::string path_;
  std::string version_;
};

}  // namespace gpumux
