#include "tests/client/fake_daemon.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/memory_stats.h"
#include "gpumux/v1/device.grpc.pb.h"
#include "gpumux/v1/memory.grpc.pb.h"
#include "gpumux/v1/observe.grpc.pb.h"
#include "gpumux/v1/session.grpc.pb.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"
#include "gtest/gtest.h"

namespace gpumux::testing {

using SessionStreamT = grpc::ServerReaderWriter<v1::SessionServerMessage, v1::SessionClientMessage>;

class FakeDaemon::State {
 public:
  struct Segment {
    std::string name;
    int32_t device = 0;
    uint64_t session = 0;
    bool shareable = false;
    uint64_t next_offset = 0;
    void* map = nullptr;
  };
  struct Allocation {
    uint64_t session = 0;
    uint64_t segment = 0;
    uint64_t offset = 0;
    uint64_t size = 0;
    uint64_t requested = 0;
  };
  struct Session {
    v1::OpenSessionRequest request;
    SessionStreamT* stream = nullptr;
  };

  explicit State(Options o) : options(o) {}
  ~State() {
    for (auto& [id, segment] : segments) ReleaseSegment(segment);
  }

  static void ReleaseSegment(Segment& segment) {
    munmap(segment.map, kSegmentSize);
    shm_unlink(segment.name.c_str());
  }

  // The session a call's credentials name, or 0 (then counted).
  uint64_t Authenticate(const grpc::ServerContext& context) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    auto it = context.client_metadata().find("gpumux-session");
    if (it != context.client_metadata().end()) {
      std::string value(it->second.data(), it->second.size());
      for (const auto& [id, session] : sessions) {
        if (value == absl::StrCat(id, ":", kSecret)) return id;
      }
    }
    ++unauthenticated;
    return 0;
  }

  uint64_t NewSegment(uint64_t session, int32_t device, bool shareable)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    static std::atomic<int> counter{0};
    Segment segment;
    segment.name = absl::StrCat("/gpumux-fake-", getpid(), "-", counter++);
    segment.device = device;
    segment.session = session;
    segment.shareable = shareable;
    int fd = shm_open(segment.name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    EXPECT_GE(fd, 0) << std::strerror(errno);
    EXPECT_EQ(ftruncate(fd, kSegmentSize), 0);
    segment.map = mmap(nullptr, kSegmentSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    const uint64_t id = next_segment++;
    segments.emplace(id, std::move(segment));
    return id;
  }

  void ToProto(uint64_t id, const Allocation& allocation, v1::Allocation* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    const Segment& segment = segments.at(allocation.segment);
    out->set_allocation_id(id);
    out->set_device(segment.device);
    out->set_requested_size(allocation.requested);
    out->set_size(allocation.size);
    out->set_segment_id(allocation.segment);
    out->mutable_segment_handle()->set_kind(options.cuda_handles ? v1::HANDLE_KIND_CUDA_IPC
                                                                 : v1::HANDLE_KIND_HOST_SHM);
    out->mutable_segment_handle()->set_data(options.cuda_handles ? std::string(64, '\x7f')
                                                                 : segment.name);
    out->set_segment_size(kSegmentSize);
    out->set_offset(allocation.offset);
    out->set_address(0x7f0000000000 + allocation.segment * kSegmentSize + allocation.offset);
  }

  grpc::Status Free(uint64_t session, const google::protobuf::RepeatedField<uint64_t>& ids)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    std::set<uint64_t> seen;
    for (uint64_t id : ids) {
      auto it = allocations.find(id);
      if (it == allocations.end() || it->second.session != session) {
        return grpc::Status(grpc::StatusCode::NOT_FOUND,
                            absl::StrCat("allocation ", id, " not found"));
      }
      if (!seen.insert(id).second) {
        return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                            absl::StrCat("allocation ", id, " named twice"));
      }
    }
    for (uint64_t id : ids) allocations.erase(id);
    return grpc::Status::OK;
  }

  v1::MemoryStats Stats(int32_t device, uint64_t session) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    v1::MemoryStats stats;
    for (const std::string& key : MemoryStatsKeys()) (*stats.mutable_values())[key] = 0;
    int64_t allocated = 0, count = 0, reserved = 0, segment_count = 0;
    for (const auto& [id, allocation] : allocations) {
      const Segment& segment = segments.at(allocation.segment);
      if (segment.device != device || (session != 0 && allocation.session != session)) continue;
      allocated += allocation.size;
      ++count;
    }
    for (const auto& [id, segment] : segments) {
      if (segment.device != device || (session != 0 && segment.session != session)) continue;
      reserved += kSegmentSize;
      ++segment_count;
    }
    auto& values = *stats.mutable_values();
    values["allocated_bytes.all.current"] = allocated;
    values["allocated_bytes.all.peak"] = allocated;
    values["allocation.all.current"] = count;
    values["reserved_bytes.all.current"] = reserved;
    values["reserved_bytes.all.peak"] = reserved;
    values["segment.all.current"] = segment_count;
    return stats;
  }

  v1::MemorySnapshot Snapshot(std::optional<int32_t> device, uint64_t session)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    v1::MemorySnapshot snapshot;
    for (const auto& [id, segment] : segments) {
      if ((device.has_value() && segment.device != *device) ||
          (session != 0 && segment.session != session)) {
        continue;
      }
      v1::SnapshotSegment* out = snapshot.add_segments();
      out->set_device(segment.device);
      out->set_address(0x7f0000000000 + id * kSegmentSize);
      out->set_total_size(kSegmentSize);
      out->set_segment_type("small");
      out->set_session_id(segment.session);
      out->set_segment_id(id);
      out->set_shareable(segment.shareable);
      for (const auto& [allocation_id, allocation] : allocations) {
        if (allocation.segment != id) continue;
        v1::SnapshotBlock* block = out->add_blocks();
        block->set_address(out->address() + allocation.offset);
        block->set_size(allocation.size);
        block->set_requested_size(allocation.requested);
        block->set_state("active_allocated");
        block->set_session_id(allocation.session);
        out->set_allocated_size(out->allocated_size() + allocation.size);
      }
    }
    return snapshot;
  }

  const Options options;
  absl::Mutex mu;
  std::map<uint64_t, Segment> segments ABSL_GUARDED_BY(mu);
  std::map<uint64_t, Allocation> allocations ABSL_GUARDED_BY(mu);
  std::map<std::string, uint64_t> share_tokens ABSL_GUARDED_BY(mu);
  std::map<uint64_t, Session> sessions ABSL_GUARDED_BY(mu);
  uint64_t next_segment ABSL_GUARDED_BY(mu) = 1;
  uint64_t next_allocation ABSL_GUARDED_BY(mu) = 100;
  uint64_t next_session ABSL_GUARDED_BY(mu) = 7;
  // Recorded traffic.
  std::vector<v1::OpenSessionRequest> open_requests ABSL_GUARDED_BY(mu);
  std::vector<std::vector<uint64_t>> free_calls ABSL_GUARDED_BY(mu);
  std::vector<std::vector<uint64_t>> allocate_carried_frees ABSL_GUARDED_BY(mu);
  std::vector<std::string> memory_limit_requests ABSL_GUARDED_BY(mu);
  int unauthenticated ABSL_GUARDED_BY(mu) = 0;
  int closed_cleanly ABSL_GUARDED_BY(mu) = 0;
};

namespace {

using State = FakeDaemon::State;

grpc::Status Unauthenticated() {
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "missing or wrong gpumux-session");
}

class SessionService final : public v1::Session::Service {
 public:
  explicit SessionService(State& state) : state_(state) {}

  grpc::Status Open(grpc::ServerContext* context, SessionStreamT* stream) override {
    v1::SessionClientMessage message;
    if (!stream->Read(&message) || !message.has_open()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "first message must be open");
    }
    uint64_t id;
    {
      absl::MutexLock lock(&state_.mu);
      state_.open_requests.push_back(message.open());
      if (state_.options.refuse_sessions) {
        return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "too many sessions");
      }
      if (!state_.options.send_opened)
        id = 0;
      else {
        id = state_.next_session++;
        state_.sessions[id] = State::Session{message.open(), stream};
        v1::SessionServerMessage opened;
        opened.mutable_opened()->set_session_id(id);
        opened.mutable_opened()->set_secret(FakeDaemon::kSecret);
        opened.mutable_opened()->set_tenant(message.open().tenant().empty()
                                                ? absl::StrCat("session-", id)
                                                : message.open().tenant());
        opened.mutable_opened()->set_backend("host");
        opened.mutable_opened()->set_daemon_version("fake");
        stream->Write(opened);
      }
    }
    while (stream->Read(&message)) {
    }
    absl::MutexLock lock(&state_.mu);
    if (id != 0) {
      state_.sessions.erase(id);
      for (auto it = state_.allocations.begin(); it != state_.allocations.end();) {
        it = it->second.session == id ? state_.allocations.erase(it) : std::next(it);
      }
      if (!context->IsCancelled()) ++state_.closed_cleanly;
    }
    return grpc::Status::OK;
  }

  grpc::Status Ping(grpc::ServerContext* context, const v1::PingRequest*,
                    v1::PingResponse* response) override {
    absl::MutexLock lock(&state_.mu);
    uint64_t session = state_.Authenticate(*context);
    if (session == 0) return Unauthenticated();
    response->set_session_id(session);
    return grpc::Status::OK;
  }

 private:
  State& state_;
};

class DeviceService final : public v1::Device::Service {
 public:
  grpc::Status GetDeviceCount(grpc::ServerContext*, const v1::GetDeviceCountRequest*,
                              v1::GetDeviceCountResponse* response) override {
    response->set_count(FakeDaemon::kDeviceCount);
    return grpc::Status::OK;
  }
  grpc::Status ListDevices(grpc::ServerContext*, const v1::ListDevicesRequest*,
                           v1::ListDevicesResponse* response) override {
    for (int i = 0; i < FakeDaemon::kDeviceCount; ++i) Fill(i, response->add_devices());
    return grpc::Status::OK;
  }
  grpc::Status GetDeviceProperties(grpc::ServerContext*,
                                   const v1::GetDevicePropertiesRequest* request,
                                   v1::DeviceProperties* response) override {
    if (grpc::Status status = Check(request->device()); !status.ok()) return status;
    Fill(request->device(), response);
    return grpc::Status::OK;
  }
  grpc::Status Synchronize(grpc::ServerContext*, const v1::SynchronizeRequest* request,
                           v1::SynchronizeResponse*) override {
    return Check(request->device());
  }

 private:
  static grpc::Status Check(int32_t device) {
    if (device >= 0 && device < FakeDaemon::kDeviceCount) return grpc::Status::OK;
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("device ", device, " is out of range (2 devices)"));
  }
  static void Fill(int index, v1::DeviceProperties* out) {
    out->set_index(index);
    out->set_name(absl::StrCat("fake", index));
    out->set_backend("host");
    out->set_total_memory(FakeDaemon::kDeviceMemory);
    out->set_free_memory(FakeDaemon::kDeviceMemory / 2);
    out->set_multi_processor_count(4);
  }
};

class MemoryService final : public v1::Memory::Service {
 public:
  explicit MemoryService(State& state) : state_(state) {}

  grpc::Status Allocate(grpc::ServerContext* context, const v1::AllocateRequest* request,
                        v1::AllocateResponse* response) override {
    absl::MutexLock lock(&state_.mu);
    const uint64_t session = state_.Authenticate(*context);
    if (session == 0) return Unauthenticated();
    state_.allocate_carried_frees.emplace_back(request->free_allocation_ids().begin(),
                                               request->free_allocation_ids().end());
    // Request validation happens before the carried frees are applied.
    if (request->size() == 0) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "cannot allocate 0 bytes");
    }
    if (request->device() < 0 || request->device() >= FakeDaemon::kDeviceCount) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "device out of range");
    }
    if (grpc::Status status = state_.Free(session, request->free_allocation_ids()); !status.ok()) {
      return status;
    }
    if (request->size() > FakeDaemon::kSegmentSize) {
      return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                          "CUDA out of memory. Tried to allocate too much");
    }
    const uint64_t size = (request->size() + 511) / 512 * 512;
    uint64_t segment_id = 0;
    if (!request->shareable()) {
      for (auto& [id, segment] : state_.segments) {
        if (segment.session == session && segment.device == request->device() &&
            !segment.shareable && segment.next_offset + size <= FakeDaemon::kSegmentSize) {
          segment_id = id;
        }
      }
    }
    if (segment_id == 0)
      segment_id = state_.NewSegment(session, request->device(), request->shareable());
    State::Segment& segment = state_.segments.at(segment_id);
    State::Allocation allocation{session, segment_id, segment.next_offset, size, request->size()};
    segment.next_offset += size;
    const uint64_t id = state_.next_allocation++;
    state_.allocations[id] = allocation;
    state_.ToProto(id, allocation, response->mutable_allocation());
    return grpc::Status::OK;
  }

  grpc::Status Free(grpc::ServerContext* context, const v1::FreeRequest* request,
                    v1::FreeResponse*) override {
    absl::MutexLock lock(&state_.mu);
    const uint64_t session = state_.Authenticate(*context);
    if (session == 0) return Unauthenticated();
    state_.free_calls.emplace_back(request->allocation_ids().begin(),
                                   request->allocation_ids().end());
    return state_.Free(session, request->allocation_ids());
  }

  grpc::Status EmptyCache(grpc::ServerContext* context, const v1::EmptyCacheRequest* request,
                          v1::EmptyCacheResponse* response) override {
    absl::MutexLock lock(&state_.mu);
    const uint64_t session = state_.Authenticate(*context);
    if (session == 0) return Unauthenticated();
    std::set<uint64_t> used;
    for (const auto& [id, allocation] : state_.allocations) used.insert(allocation.segment);
    for (auto it = state_.segments.begin(); it != state_.segments.end();) {
      State::Segment& segment = it->second;
      const bool mine = request->all_sessions() || segment.session == session;
      const bool device_ok = request->all_devices() || segment.device == request->device();
      if (!mine || !device_ok || used.count(it->first) > 0) {
        ++it;
        continue;
      }
      if (auto owner = state_.sessions.find(segment.session); owner != state_.sessions.end()) {
        v1::SessionServerMessage notice;
        notice.mutable_segment_released()->set_device(segment.device);
        notice.mutable_segment_released()->set_segment_id(it->first);
        owner->second.stream->Write(notice);
      }
      response->set_released_bytes(response->released_bytes() + FakeDaemon::kSegmentSize);
      response->set_released_segments(response->released_segments() + 1);
      State::ReleaseSegment(segment);
      it = state_.segments.erase(it);
    }
    return grpc::Status::OK;
  }

  grpc::Status GetStats(grpc::ServerContext* context, const v1::GetStatsRequest* request,
                        v1::MemoryStats* response) override {
    absl::MutexLock lock(&state_.mu);
    const uint64_t session = state_.Authenticate(*context);
    if (session == 0) return Unauthenticated();
    *response = state_.Stats(request->device(), session);
    return grpc::Status::OK;
  }

  grpc::Status GetSummary(grpc::ServerContext* context, const v1::GetSummaryRequest* request,
                          v1::MemorySummary* response) override {
    absl::MutexLock lock(&state_.mu);
    if (state_.Authenticate(*context) == 0) return Unauthenticated();
    response->set_text(absl::StrCat("summary of device ", request->device(),
                                    request->abbreviated() ? " (abbreviated)" : "", "\n"));
    return grpc::Status::OK;
  }

  grpc::Status GetSnapshot(grpc::ServerContext* context, const v1::GetSnapshotRequest* request,
                           v1::MemorySnapshot* response) override {
    absl::MutexLock lock(&state_.mu);
    const uint64_t session = state_.Authenticate(*context);
    if (session == 0) return Unauthenticated();
    *response = state_.Snapshot(
        request->all_devices() ? std::nullopt : std::optional<int32_t>(request->device()), session);
    return grpc::Status::OK;
  }

  grpc::Status SetMemoryLimit(grpc::ServerContext* context,
                              const v1::SetMemoryLimitRequest* request,
                              v1::SetMemoryLimitResponse*) override {
    absl::MutexLock lock(&state_.mu);
    if (state_.Authenticate(*context) == 0) return Unauthenticated();
    std::string limit = request->has_fraction() ? absl::StrCat("fraction=", request->fraction())
                        : request->has_bytes()  ? absl::StrCat("bytes=", request->bytes())
                        : request->unlimited()  ? std::string("unlimited")
                                                : std::string("none");
    state_.memory_limit_requests.push_back(absl::StrCat("device=", request->device(), " ", limit));
    return grpc::Status::OK;
  }

  grpc::Status ResetPeakStats(grpc::ServerContext* context, const v1::ResetStatsRequest*,
                              v1::ResetStatsResponse*) override {
    absl::MutexLock lock(&state_.mu);
    return state_.Authenticate(*context) == 0 ? Unauthenticated() : grpc::Status::OK;
  }
  grpc::Status ResetAccumulatedStats(grpc::ServerContext* context, const v1::ResetStatsRequest*,
                                     v1::ResetStatsResponse*) override {
    absl::MutexLock lock(&state_.mu);
    return state_.Authenticate(*context) == 0 ? Unauthenticated() : grpc::Status::OK;
  }

  grpc::Status Share(grpc::ServerContext* context, const v1::ShareRequest* request,
                     v1::ShareResponse* response) override {
    absl::MutexLock lock(&state_.mu);
    const uint64_t session = state_.Authenticate(*context);
    if (session == 0) return Unauthenticated();
    auto it = state_.allocations.find(request->allocation_id());
    if (it == state_.allocations.end() || it->second.session != session) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND, "no such allocation");
    }
    if (!state_.segments.at(it->second.segment).shareable) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "allocation is not shareable");
    }
    const std::string token = absl::StrCat("token-", request->allocation_id());
    state_.share_tokens[token] = request->allocation_id();
    response->set_token(token);
    return grpc::Status::OK;
  }

  grpc::Status Import(grpc::ServerContext* context, const v1::ImportRequest* request,
                      v1::ImportResponse* response) override {
    absl::MutexLock lock(&state_.mu);
    const uint64_t session = state_.Authenticate(*context);
    if (session == 0) return Unauthenticated();
    auto token = state_.share_tokens.find(request->token());
    if (token == state_.share_tokens.end()) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND, "unknown share token");
    }
    State::Allocation allocation = state_.allocations.at(token->second);
    state_.share_tokens.erase(token);
    allocation.session = session;
    const uint64_t id = state_.next_allocation++;
    state_.allocations[id] = allocation;
    state_.ToProto(id, allocation, response->mutable_allocation());
    return grpc::Status::OK;
  }

 private:
  State& state_;
};

class ObserveService final : public v1::Observe::Service {
 public:
  explicit ObserveService(State& state) : state_(state) {}

  grpc::Status ListSessions(grpc::ServerContext*, const v1::ListSessionsRequest*,
                            v1::ListSessionsResponse* response) override {
    absl::MutexLock lock(&state_.mu);
    for (const auto& [id, session] : state_.sessions) {
      v1::SessionInfo* info = response->add_sessions();
      info->set_session_id(id);
      info->set_client_name(session.request.client_name());
      info->set_pid(session.request.pid());
      info->set_tenant(session.request.tenant());
      info->mutable_labels()->insert(session.request.labels().begin(),
                                     session.request.labels().end());
      const v1::MemoryStats stats = state_.Stats(0, id);
      if (stats.values().at("segment.all.current") == 0) continue;
      v1::SessionDeviceUsage* usage = info->add_devices();
      usage->set_allocated_bytes(stats.values().at("allocated_bytes.all.current"));
      usage->set_reserved_bytes(stats.values().at("reserved_bytes.all.current"));
      usage->set_allocations(stats.values().at("allocation.all.current"));
    }
    return grpc::Status::OK;
  }

  grpc::Status GetMemoryStats(grpc::ServerContext*, const v1::ObserveStatsRequest* request,
                              v1::MemoryStats* response) override {
    absl::MutexLock lock(&state_.mu);
    if (request->session_id() != 0 && state_.sessions.count(request->session_id()) == 0) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND,
                          absl::StrCat("session ", request->session_id(), " not found"));
    }
    *response = state_.Stats(request->device(), request->session_id());
    return grpc::Status::OK;
  }

  grpc::Status GetMemorySummary(grpc::ServerContext*, const v1::ObserveSummaryRequest* request,
                                v1::MemorySummary* response) override {
    response->set_text(absl::StrCat("observed summary of device ", request->device(), "\n"));
    return grpc::Status::OK;
  }

  grpc::Status GetMemorySnapshot(grpc::ServerContext*, const v1::ObserveSnapshotRequest* request,
                                 v1::MemorySnapshot* response) override {
    absl::MutexLock lock(&state_.mu);
    *response = state_.Snapshot(
        request->all_devices() ? std::nullopt : std::optional<int32_t>(request->device()),
        request->session_id());
    return grpc::Status::OK;
  }

 private:
  State& state_;
};

}  // namespace

FakeDaemon::FakeDaemon(Options options) : state_(std::make_unique<State>(options)) {
  char dir_template[] = "/tmp/gpumux-fake-XXXXXX";
  char* dir = mkdtemp(dir_template);
  EXPECT_NE(dir, nullptr);
  dir_ = dir;
  socket_path_ = dir_ + "/gpumuxd.sock";
  services_.push_back(std::make_unique<SessionService>(*state_));
  services_.push_back(std::make_unique<DeviceService>());
  services_.push_back(std::make_unique<MemoryService>(*state_));
  services_.push_back(std::make_unique<ObserveService>(*state_));
  grpc::ServerBuilder builder;
  builder.AddListeningPort(address(), grpc::InsecureServerCredentials());
  for (auto& service : services_) builder.RegisterService(service.get());
  server_ = builder.BuildAndStart();
  EXPECT_NE(server_, nullptr) << "cannot serve on " << address();
}

FakeDaemon::~FakeDaemon() {
  Shutdown();
  state_.reset();
  std::filesystem::remove_all(dir_);
}

void FakeDaemon::Shutdown() {
  absl::MutexLock lock(&shutdown_mu_);
  if (shut_down_ || server_ == nullptr) return;
  shut_down_ = true;
  // Open session streams never end by themselves: cancel them at once.
  server_->Shutdown(std::chrono::system_clock::now());
  server_->Wait();
}

void FakeDaemon::SendSegmentReleased(int32_t device, uint64_t segment_id) {
  absl::MutexLock lock(&state_->mu);
  v1::SessionServerMessage notice;
  notice.mutable_segment_released()->set_device(device);
  notice.mutable_segment_released()->set_segment_id(segment_id);
  for (auto& [id, session] : state_->sessions) session.stream->Write(notice);
}

std::string FakeDaemon::ReadAllocation(uint64_t allocation_id, size_t length) {
  absl::MutexLock lock(&state_->mu);
  const State::Allocation& allocation = state_->allocations.at(allocation_id);
  const char* base = static_cast<const char*>(state_->segments.at(allocation.segment).map);
  return std::string(base + allocation.offset, length);
}

void FakeDaemon::WriteAllocation(uint64_t allocation_id, const std::string& bytes) {
  absl::MutexLock lock(&state_->mu);
  const State::Allocation& allocation = state_->allocations.at(allocation_id);
  char* base = static_cast<char*>(state_->segments.at(allocation.segment).map);
  std::memcpy(base + allocation.offset, bytes.data(), bytes.size());
}

std::vector<v1::OpenSessionRequest> FakeDaemon::open_requests() const {
  absl::MutexLock lock(&state_->mu);
  return state_->open_requests;
}
std::vector<std::vector<uint64_t>> FakeDaemon::free_calls() const {
  absl::MutexLock lock(&state_->mu);
  return state_->free_calls;
}
std::vector<std::vector<uint64_t>> FakeDaemon::allocate_carried_frees() const {
  absl::MutexLock lock(&state_->mu);
  return state_->allocate_carried_frees;
}
int FakeDaemon::unauthenticated_calls() const {
  absl::MutexLock lock(&state_->mu);
  return state_->unauthenticated;
}
std::vector<std::string> FakeDaemon::memory_limit_requests() const {
  absl::MutexLock lock(&state_->mu);
  return state_->memory_limit_requests;
}
int FakeDaemon::live_allocations() const {
  absl::MutexLock lock(&state_->mu);
  return static_cast<int>(state_->allocations.size());
}
int FakeDaemon::sessions_open() const {
  absl::MutexLock lock(&state_->mu);
  return static_cast<int>(state_->sessions.size());
}
int FakeDaemon::sessions_closed_cleanly() const {
  absl::MutexLock lock(&state_->mu);
  return state_->closed_cleanly;
}

}  // namespace gpumux::testing
