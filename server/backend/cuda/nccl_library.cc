#include "server/backend/cuda/nccl_library.h"

#include <dlfcn.h>

#include "absl/strings/str_cat.h"

namespace gpumux {
namespace {

constexpr int kMinVersion = 21400;  // 2.14: ncclCommInitRankConfig (nonblocking); ncclAvg, bf16

template <typename Fn>
bool Resolve(void* handle, const char* name, Fn* fn) {
  *fn = reinterpret_cast<Fn>(dlsym(handle, name));
  return *fn != nullptr;
}

}  // namespace

absl::StatusOr<std::unique_ptr<NcclLibrary>> NcclLibrary::Load(const std::string& path) {
  const std::string name = path.empty() ? "libnccl.so.2" : path;
  dlerror();
  void* handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    return absl::NotFoundError(
        absl::StrCat("cannot load NCCL (", name, "): ", why != nullptr ? why : "dlopen failed"));
  }
  std::unique_ptr<NcclLibrary> lib(new NcclLibrary());
  lib->handle_ = handle;
  lib->path_ = name;
  const char* missing = nullptr;
#define GPUMUX_NCCL_RESOLVE(member, symbol) \
  if (missing == nullptr && !Resolve(handle, #symbol, &lib->member)) missing = #symbol
  GPUMUX_NCCL_RESOLVE(GetErrorString, ncclGetErrorString);
  GPUMUX_NCCL_RESOLVE(GetLastError, ncclGetLastError);
  GPUMUX_NCCL_RESOLVE(GetVersion, ncclGetVersion);
  GPUMUX_NCCL_RESOLVE(GetUniqueId, ncclGetUniqueId);
  GPUMUX_NCCL_RESOLVE(CommInitAll, ncclCommInitAll);
  GPUMUX_NCCL_RESOLVE(CommInitRankConfig, ncclCommInitRankConfig);
  GPUMUX_NCCL_RESOLVE(CommDestroy, ncclCommDestroy);
  GPUMUX_NCCL_RESOLVE(CommAbort, ncclCommAbort);
  GPUMUX_NCCL_RESOLVE(CommGetAsyncError, ncclCommGetAsyncError);
  GPUMUX_NCCL_RESOLVE(GroupStart, ncclGroupStart);
  GPUMUX_NCCL_RESOLVE(GroupEnd, ncclGroupEnd);
  GPUMUX_NCCL_RESOLVE(AllReduce, ncclAllReduce);
  GPUMUX_NCCL_RESOLVE(Broadcast, ncclBroadcast);
  GPUMUX_NCCL_RESOLVE(Reduce, ncclReduce);
  GPUMUX_NCCL_RESOLVE(AllGather, ncclAllGather);
  GPUMUX_NCCL_RESOLVE(ReduceScatter, ncclReduceScatter);
#undef GPUMUX_NCCL_RESOLVE
  if (missing != nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("NCCL at ", name, " lacks ", missing, ": not a usable libnccl"));
  }
  int version = 0;
  if (ncclResult_t r = lib->GetVersion(&version); r != ncclSuccess) {
    return lib->Check(r, nullptr, "ncclGetVersion");
  }
  // 2.9 and later encode major * 10000 + minor * 100 + patch.
  lib->version_ = absl::StrCat(version / 10000, ".", version / 100 % 100, ".", version % 100);
  if (version < kMinVersion) {
    return absl::FailedPreconditionError(absl::StrCat("NCCL ", lib->version_, " at ", name,
                                                      " is older than 2.14, which gpumux needs"));
  }
  return lib;
}

absl::Status NcclLibrary::Check(ncclResult_t result, ncclComm_t comm,
                                absl::string_view what) const {
  if (result == ncclSuccess) return absl::OkStatus();
  const char* last = GetLastError != nullptr ? GetLastError(comm) : nullptr;
  std::string message = absl::StrCat(what, ": ", GetErrorString(result));
  if (last != nullptr && *last != '\0') absl::StrAppend(&message, " (", last, ")");
  switch (result) {
    case ncclInvalidArgument:
    case ncclInvalidUsage:
      return absl::InvalidArgumentError(message);
    case ncclUnhandledCudaError:
    case ncclSystemError:
    case ncclRemoteError:
      return absl::UnavailableError(message);
    default:
      return absl::InternalError(message);
  }
}

}  // namespace gpumux
