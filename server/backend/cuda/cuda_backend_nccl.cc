// CudaBackend's CollectiveEngine on NCCL (server/backend/collective_engine.h):
// one single-process communicator per ordered list of devices
// (ncclCommInitAll), made on first use and kept for the daemon's life, so
// every later collective on those devices, of any session, pays nothing for
// set-up. Built only where nccl.h was found; NCCL itself is loaded at start
// (NcclLibrary).
//
// Every call is issued under one lock, all of its parts between
// ncclGroupStart and ncclGroupEnd: NCCL wants the collectives of the
// communicators that share a device launched in the same order on all of
// them, and issuing only launches kernels (microseconds). A communicator
// whose call failed, or that reports an asynchronous error, is aborted and
// dropped; the next call on its devices makes a new one. A CUDA error that
// is sticky marks its device unhealthy as every other call does.

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/base/status_macros.h"
#include "common/cuda/cuda_status.h"
#include "server/backend/cuda/cuda_backend.h"
#include "server/backend/cuda/nccl_library.h"
#include "spdlog/spdlog.h"

namespace gpumux {
namespace {

ncclDataType_t NcclType(RngDtype dtype) {
  switch (dtype) {
    case RngDtype::kF32:
      return ncclFloat32;
    case RngDtype::kF64:
      return ncclFloat64;
    case RngDtype::kF16:
      return ncclFloat16;
    case RngDtype::kBF16:
      return ncclBfloat16;
    case RngDtype::kI32:
      return ncclInt32;
    case RngDtype::kI64:
      return ncclInt64;
    case RngDtype::kU8:
      return ncclUint8;
  }
  return ncclUint8;
}

ncclRedOp_t NcclOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kProduct:
      return ncclProd;
    case ReduceOp::kMin:
      return ncclMin;
    case ReduceOp::kMax:
      return ncclMax;
    case ReduceOp::kAvg:
      return ncclAvg;
  }
  return ncclSum;
}

// Polls `done` (OK, or the error that ends the wait, or nullopt while
// pending) from 20 us up to 1 ms apart until it answers or `deadline`.
template <typename Poll>
std::optional<absl::Status> PollUntil(absl::Time deadline, Poll done) {
  absl::Duration pause = absl::Microseconds(20);
  while (true) {
    if (std::optional<absl::Status> answer = done(); answer.has_value()) return answer;
    if (absl::Now() >= deadline) return std::nullopt;
    absl::SleepFor(pause);
    pause = std::min(pause * 2, absl::Milliseconds(1));
  }
}

}  // namespace

// One rank of a nonblocking communicator across processes
// (ncclCommInitRankConfig with blocking = 0): no NCCL call can then hang the
// daemon; Wait watches the stream and the communicator's error together,
// and aborts it when a peer failed or the timeout passed.
class CudaBackend::NcclGroup final : public GroupCommunicator {
 public:
  // `timeout` bounds each call's issuing (NCCL connects to the peers on
  // first use).
  NcclGroup(CudaBackend* backend, const NcclLibrary* lib, DeviceIndex device, ncclComm_t comm,
            int world_size, absl::Duration timeout)
      : backend_(backend),
        lib_(lib),
        device_(device),
        comm_(comm),
        world_size_(world_size),
        timeout_(timeout) {}
  ~NcclGroup() override {
    if (comm_ == nullptr) return;
    // Destroy would wait for queued work a dead peer never completes; the
    // group is over, so its work is not wanted.
    lib_->CommAbort(comm_);
  }

  DeviceIndex device() const override { return device_; }
  bool broken() const override { return !aborted_.ok(); }

  absl::Status AllReduce(BackendStream stream, uint64_t send, uint64_t recv, uint64_t count,
                         RngDtype dtype, ReduceOp op) override {
    const uint64_t bytes = count * RngElementSize(dtype);
    return Issue("ncclAllReduce", stream, {{send, bytes}, {recv, bytes}}, [&](cudaStream_t s) {
      return lib_->AllReduce(Ptr(send), Ptr(recv), count, NcclType(dtype), NcclOp(op), comm_, s);
    });
  }
  absl::Status Broadcast(BackendStream stream, uint64_t send, uint64_t recv, uint64_t bytes,
                         int root) override {
    return Issue("ncclBroadcast", stream, {{send, bytes}, {recv, bytes}}, [&](cudaStream_t s) {
      return lib_->Broadcast(Ptr(send), Ptr(recv), bytes, ncclUint8, root, comm_, s);
    });
  }
  absl::Status AllGather(BackendStream stream, uint64_t send, uint64_t recv,
                         uint64_t bytes) override {
    return Issue("ncclAllGather", stream, {{send, bytes}, {recv, bytes * world_size()}},
                 [&](cudaStream_t s) {
                   return lib_->AllGather(Ptr(send), Ptr(recv), bytes, ncclUint8, comm_, s);
                 });
  }
  absl::Status ReduceScatter(BackendStream stream, uint64_t send, uint64_t recv, uint64_t count,
                             RngDtype dtype, ReduceOp op) override {
    const uint64_t bytes = count * RngElementSize(dtype);
    return Issue("ncclReduceScatter", stream, {{send, bytes * world_size()}, {recv, bytes}},
                 [&](cudaStream_t s) {
                   return lib_->ReduceScatter(Ptr(send), Ptr(recv), count, NcclType(dtype),
                                              NcclOp(op), comm_, s);
                 });
  }

  absl::Status Wait(BackendStream stream, absl::Duration timeout) override {
    GPUMUX_RETURN_IF_ERROR(Usable());
    GPUMUX_ASSIGN_OR_RETURN(Stream s, backend_->FindStream(stream));
    GPUMUX_RETURN_IF_ERROR(backend_->UseDevice(s.device));
    std::optional<absl::Status> done =
        PollUntil(absl::Now() + timeout, [&]() -> std::optional<absl::Status> {
          if (absl::Status error = AsyncError(); !error.ok()) return error;
          const cudaError_t queried = cudaStreamQuery(s.get());
          if (CudaNotReady(queried)) return std::nullopt;
          return backend_->Check(device_, queried, "cudaStreamQuery after NCCL");
        });
    if (!done.has_value()) {
      return Abort(absl::DeadlineExceededError(
          absl::StrCat("the NCCL collective did not complete within ",
                       absl::FormatDuration(timeout), " (a peer did not take part)")));
    }
    if (!done->ok()) return Abort(*done);
    return absl::OkStatus();
  }

  int world_size() const { return world_size_; }

 private:
  struct Range {
    uint64_t address;
    uint64_t bytes;
  };
  static void* Ptr(uint64_t address) { return reinterpret_cast<void*>(address); }

  absl::Status Usable() const {
    if (!aborted_.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("the group's NCCL communicator was aborted: ", aborted_.message()));
    }
    return absl::OkStatus();
  }
  // The communicator's asynchronous error; OK also while an operation is
  // still being issued (ncclInProgress).
  absl::Status AsyncError() const {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t asked = lib_->CommGetAsyncError(comm_, &state);
    if (asked != ncclSuccess) return lib_->Check(asked, comm_, "ncclCommGetAsyncError");
    if (state == ncclInProgress) return absl::OkStatus();
    return lib_->Check(state, comm_, "the group's NCCL communicator");
  }
  // Aborts the communicator after `why` (every later call fails) and
  // returns `why`.
  absl::Status Abort(absl::Status why) {
    if (aborted_.ok()) {
      aborted_ = why;
      lib_->CommAbort(comm_);
      comm_ = nullptr;
      backend_->Check(device_, cudaGetLastError(), "after an aborted NCCL communicator")
          .IgnoreError();
    }
    return why;
  }

  absl::Status Issue(absl::string_view what, BackendStream stream,
                     std::initializer_list<Range> ranges,
                     absl::FunctionRef<ncclResult_t(cudaStream_t)> call) {
    GPUMUX_RETURN_IF_ERROR(Usable());
    GPUMUX_ASSIGN_OR_RETURN(Stream s, backend_->FindStream(stream));
    if (s.device != device_) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": the stream is on device ",
                                                     s.device.value(), ", the group's NCCL on ",
                                                     device_.value()));
    }
    GPUMUX_RETURN_IF_ERROR(backend_->UseDevice(device_));
    // Until the call is queued (its first use connects to the peers first):
    // memory it names is not unmapped under it meanwhile.
    absl::ReaderMutexLock enqueuing(&backend_->enqueue_mu_);
    for (const Range& range : ranges) {
      if (range.bytes > 0)
        GPUMUX_RETURN_IF_ERROR(backend_->CheckRange(device_, range.address, range.bytes));
    }
    const ncclResult_t issued = call(s.get());
    if (issued != ncclSuccess && issued != ncclInProgress) {
      return Abort(lib_->Check(issued, comm_, what));
    }
    // Nonblocking: the call is queued once the communicator leaves
    // ncclInProgress (its first use also connects to the peers).
    std::optional<absl::Status> queued =
        PollUntil(absl::Now() + timeout_, [&]() -> std::optional<absl::Status> {
          ncclResult_t state = ncclSuccess;
          const ncclResult_t asked = lib_->CommGetAsyncError(comm_, &state);
          if (asked != ncclSuccess) return lib_->Check(asked, comm_, "ncclCommGetAsyncError");
          if (state == ncclInProgress) return std::nullopt;
          return lib_->Check(state, comm_, what);
        });
    if (!queued.has_value()) {
      return Abort(absl::DeadlineExceededError(absl::StrCat(what, " was not queued within ",
                                                            absl::FormatDuration(timeout_),
                                                            " (connecting to the peers)")));
    }
    if (!queued->ok()) return Abort(*queued);
    return absl::OkStatus();
  }

  CudaBackend* const backend_;
  const NcclLibrary* const lib_;
  const DeviceIndex device_;
  ncclComm_t comm_;
  const int world_size_;
  const absl::Duration timeout_;
  absl::Status aborted_;
};

class CudaBackend::Nccl final : public CollectiveEngine {
 public:
  Nccl(CudaBackend* backend, std::unique_ptr<NcclLibrary> lib)
      : backend_(backend), lib_(std::move(lib)) {}

  ~Nccl() override {
    // At shutdown (AbandonInterprocessWaits) a communicator may have work
    // queued behind a dead client's event: destroying it would wait.
    const bool exiting = backend_->abandon_waits_.load();
    absl::MutexLock lock(&mu_);
    for (auto& [devices, comms] : cliques_) {
      for (ncclComm_t comm : comms) exiting ? (void)0 : (void)lib_->CommDestroy(comm);
    }
  }

  std::string description() const override { return absl::StrCat("nccl ", lib_->version()); }

  uint64_t communicators_created() const override {
    absl::MutexLock lock(&mu_);
    return created_;
  }

  absl::Status AllReduce(absl::Span<const CollectivePart> parts, ReduceOp op, RngDtype dtype,
                         uint64_t count) override {
    const uint64_t bytes = count * RngElementSize(dtype);
    return Issue("ncclAllReduce", parts, bytes, /*root=*/std::nullopt,
                 [&](size_t i, ncclComm_t comm, cudaStream_t stream) {
                   return lib_->AllReduce(Ptr(parts[i].send), Ptr(parts[i].recv), count,
                                          NcclType(dtype), NcclOp(op), comm, stream);
                 });
  }

  absl::Status Broadcast(absl::Span<const CollectivePart> parts, size_t root,
                         uint64_t bytes) override {
    return Issue("ncclBroadcast", parts, bytes, root,
                 [&](size_t i, ncclComm_t comm, cudaStream_t stream) {
                   return lib_->Broadcast(Ptr(parts[i].send), Ptr(parts[i].recv), bytes, ncclUint8,
                                          static_cast<int>(root), comm, stream);
                 });
  }

  absl::StatusOr<std::string> NewGroupId() override {
    ncclUniqueId id;
    GPUMUX_RETURN_IF_ERROR(lib_->Check(lib_->GetUniqueId(&id), nullptr, "ncclGetUniqueId"));
    return std::string(reinterpret_cast<const char*>(&id), sizeof(id));
  }

  absl::StatusOr<std::unique_ptr<GroupCommunicator>> JoinGroup(DeviceIndex device,
                                                               absl::string_view id, int world_size,
                                                               int rank,
                                                               absl::Duration timeout) override {
    ncclUniqueId unique;
    if (id.size() != sizeof(unique)) {
      return absl::InvalidArgumentError(
          absl::StrCat("an NCCL group id has ", sizeof(unique), " bytes, not ", id.size()));
    }
    if (world_size < 1 || rank < 0 || rank >= world_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("rank ", rank, " is out of range for world size ", world_size));
    }
    std::memcpy(&unique, id.data(), sizeof(unique));
    GPUMUX_RETURN_IF_ERROR(backend_->UseDevice(device));
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t comm = nullptr;
    const ncclResult_t started = lib_->CommInitRankConfig(&comm, world_size, unique, rank, &config);
    if (started != ncclSuccess && started != ncclInProgress) {
      if (comm != nullptr) lib_->CommAbort(comm);
      return lib_->Check(started, nullptr, "ncclCommInitRankConfig");
    }
    std::optional<absl::Status> joined =
        PollUntil(absl::Now() + timeout, [&]() -> std::optional<absl::Status> {
          ncclResult_t state = ncclSuccess;
          const ncclResult_t asked = lib_->CommGetAsyncError(comm, &state);
          if (asked != ncclSuccess) return lib_->Check(asked, comm, "ncclCommGetAsyncError");
          if (state == ncclInProgress) return std::nullopt;
          return lib_->Check(state, comm, "ncclCommInitRankConfig");
        });
    if (!joined.has_value() || !joined->ok()) {
      lib_->CommAbort(comm);
      if (!joined.has_value()) {
        return absl::DeadlineExceededError(absl::StrCat(
            "the group's NCCL communicator (rank ", rank, " of ", world_size, ", device ",
            device.value(), ") did not form within ", absl::FormatDuration(timeout)));
      }
      return *joined;
    }
    {
      absl::MutexLock lock(&mu_);
      ++created_;
    }
    return std::unique_ptr<GroupCommunicator>(
        new NcclGroup(backend_, lib_.get(), device, comm, world_size, timeout));
  }

  absl::Status Reduce(absl::Span<const CollectivePart> parts, size_t root, ReduceOp op,
                      RngDtype dtype, uint64_t count) override {
    const uint64_t bytes = count * RngElementSize(dtype);
    return Issue(
        "ncclReduce", parts, bytes, root, [&](size_t i, ncclComm_t comm, cudaStream_t stream) {
          return lib_->Reduce(Ptr(parts[i].send), Ptr(parts[i].recv), count, NcclType(dtype),
                              NcclOp(op), static_cast<int>(root), comm, stream);
        });
  }

 private:
  static void* Ptr(uint64_t address) { return reinterpret_cast<void*>(address); }

  // Checks the parts, then issues `call(i, comm, stream)` for every part in
  // one NCCL group on the communicator of their devices. `bytes` must lie
  // at every part's send and recv, except where NCCL does not touch them:
  // only the root's send for a broadcast, only the root's recv for a
  // reduce.
  absl::Status Issue(absl::string_view what, absl::Span<const CollectivePart> parts, uint64_t bytes,
                     std::optional<size_t> root,
                     absl::FunctionRef<ncclResult_t(size_t, ncclComm_t, cudaStream_t)> call) {
    if (parts.empty()) return absl::InvalidArgumentError(absl::StrCat(what, ": no devices"));
    if (root.has_value() && *root >= parts.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": root ", *root, " is not one of ", parts.size(), " parts"));
    }
    const bool reduce = what == "ncclReduce";
    std::vector<Stream> streams;
    std::vector<int> devices;
    absl::ReaderMutexLock enqueuing(&backend_->enqueue_mu_);  // until the work is queued
    for (size_t i = 0; i < parts.size(); ++i) {
      GPUMUX_ASSIGN_OR_RETURN(Stream stream, backend_->FindStream(parts[i].stream));
      const DeviceIndex device = stream.device;
      if (device != parts[i].device) {
        return absl::InvalidArgumentError(absl::StrCat(what, ": part ", i, " names device ",
                                                       parts[i].device.value(),
                                                       " but a stream of device ", device.value()));
      }
      for (int d : devices) {
        if (d == device.value()) {
          return absl::InvalidArgumentError(
              absl::StrCat(what, ": device ", d, " takes part twice"));
        }
      }
      GPUMUX_RETURN_IF_ERROR(backend_->UseDevice(device));
      if (bytes > 0 && (!root.has_value() || reduce || i == *root))
        GPUMUX_RETURN_IF_ERROR(backend_->CheckRange(device, parts[i].send, bytes));
      if (bytes > 0 && (!reduce || i == *root))
        GPUMUX_RETURN_IF_ERROR(backend_->CheckRange(device, parts[i].recv, bytes));
      devices.push_back(device.value());
      streams.push_back(std::move(stream));
    }
    if (bytes == 0) return absl::OkStatus();

    absl::MutexLock lock(&mu_);
    GPUMUX_ASSIGN_OR_RETURN(std::vector<ncclComm_t> * comms, CommsLocked(devices));
    ncclResult_t result = lib_->GroupStart();
    absl::Status issued = lib_->Check(result, nullptr, "ncclGroupStart");
    if (issued.ok()) {
      for (size_t i = 0; i < parts.size() && result == ncclSuccess; ++i) {
        result = call(i, (*comms)[i], streams[i].get());
      }
      const ncclResult_t ended = lib_->GroupEnd();
      issued = lib_->Check(result != ncclSuccess ? result : ended,
                           result != ncclSuccess ? (*comms)[0] : nullptr, what);
    }
    if (issued.ok()) return issued;
    DropLocked(devices, issued);
    return issued;
  }

  // The communicator of `devices` (in this order), made now when there is
  // none or the last one reports an asynchronous error.
  absl::StatusOr<std::vector<ncclComm_t>*> CommsLocked(const std::vector<int>& devices)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = cliques_.find(devices);
    if (it != cliques_.end()) {
      for (ncclComm_t comm : it->second) {
        ncclResult_t async = ncclSuccess;
        const ncclResult_t asked = lib_->CommGetAsyncError(comm, &async);
        absl::Status error = lib_->Check(asked != ncclSuccess ? asked : async, comm,
                                         "the NCCL communicator's asynchronous error");
        if (!error.ok()) {
          DropLocked(devices, error);
          it = cliques_.end();
          break;
        }
      }
      if (it != cliques_.end()) return &it->second;
    }
    std::vector<ncclComm_t> comms(devices.size(), nullptr);
    GPUMUX_RETURN_IF_ERROR(lib_->Check(
        lib_->CommInitAll(comms.data(), static_cast<int>(devices.size()), devices.data()), nullptr,
        absl::StrCat("ncclCommInitAll on devices [", absl::StrJoin(devices, ", "), "]")));
    ++created_;
    spdlog::info("NCCL communicator for devices [{}] made ({} so far)",
                 absl::StrJoin(devices, ", "), created_);
    return &cliques_.emplace(devices, std::move(comms)).first->second;
  }

  // Aborts and forgets the communicator of `devices` after `why`, and lets
  // a sticky CUDA error mark its device.
  void DropLocked(const std::vector<int>& devices, const absl::Status& why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    spdlog::warn("NCCL communicator for devices [{}] dropped: {}", absl::StrJoin(devices, ", "),
                 std::string(why.message()));
    auto it = cliques_.find(devices);
    if (it != cliques_.end()) {
      for (ncclComm_t comm : it->second) lib_->CommAbort(comm);
      cliques_.erase(it);
    }
    for (int d : devices) {
      if (cudaSetDevice(d) == cudaSuccess) {
        backend_->Check(DeviceIndex(d), cudaGetLastError(), "after a failed NCCL call")
            .IgnoreError();
      }
    }
  }

  CudaBackend* const backend_;
  const std::unique_ptr<NcclLibrary> lib_;
  mutable absl::Mutex mu_;
  std::map<std::vector<int>, std::vector<ncclComm_t>> cliques_ ABSL_GUARDED_BY(mu_);
  uint64_t created_ ABSL_GUARDED_BY(mu_) = 0;
};

absl::StatusOr<std::unique_ptr<CollectiveEngine>> CudaBackend::LoadNccl(const std::string& path) {
  GPUMUX_ASSIGN_OR_RETURN(std::unique_ptr<NcclLibrary> lib, NcclLibrary::Load(path));
  return std::unique_ptr<CollectiveEngine>(new Nccl(this, std::move(lib)));
}

}  // namespace gpumux
