#include "server/core/memory_manager.h"

#include <algorithm>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "common/base/device_range.h"
#include "common/base/status_macros.h"
#include "server/core/session_registry.h"

namespace gpumux {

MemoryManager::MemoryManager(DeviceBackend* backend, const AllocatorOptions& options,
                             SessionRegistry* sessions, StreamManager* streams, Limits limits,
                             MemoryFileTable* memory_files)
    : backend_(backend),
      sessions_(sessions),
      streams_(streams),
      subscribers_(sessions),
      allocator_(backend, options,
                 [this](DeviceIndex device, SegmentId segment) {
                   subscribers_.SegmentReleased(device, segment);
                 }),
      pages_(memory_files == nullptr
                 ? nullptr
                 : std::make_unique<StatsPages>(memory_files, backend->device_count())),
      books_(backend->device_count()),
      tokens_(limits.max_share_tokens) {
  allocator_.SetPagesUnmappedCallback(
      [this](DeviceIndex device, SegmentId segment, uint64_t offset, uint64_t size) {
        subscribers_.PagesUnmapped(device, segment, offset, size);
      });
  streams_->set_stream_destroyer(
      [this](DeviceIndex device, BackendStream stream) { return DestroyStream(device, stream); });
}

absl::Status MemoryManager::DestroyStream(DeviceIndex device, BackendStream stream) {
  absl::MutexLock lock(&mu_);
  allocator_.RetireStream(device, stream);
  return backend_->DestroyStream(stream);
}

MemoryManager::~MemoryManager() { streams_->set_stream_destroyer(nullptr); }

absl::Status MemoryManager::CheckDevice(DeviceIndex device) const {
  return CheckDeviceInRange(device, allocator_.device_count());
}

void MemoryManager::AddSession(SessionId session, const std::string& tenant,
                               const std::string& share_tenant) {
  // Before the session's first call can allocate: the registry has it open,
  // but its Open has not returned to the client yet.
  allocator_.SetClientTenant(session, tenant);
  absl::MutexLock lock(&mu_);
  books_.AddSession(session);
  OpenSession& open = open_[session];
  open.share_tenant = share_tenant;
  open.fruitless.assign(static_cast<size_t>(allocator_.device_count()), std::nullopt);
}

absl::Status MemoryManager::SetTenantLimit(const std::string& tenant,
                                           std::optional<DeviceIndex> device,
                                           uint64_t limit_bytes) {
  GPUMUX_RETURN_IF_ERROR(CheckTenantName(tenant));
  if (device.has_value()) GPUMUX_RETURN_IF_ERROR(CheckDevice(*device));
  allocator_.SetTenantLimit(device, tenant, limit_bytes);
  return absl::OkStatus();
}

absl::StatusOr<AllocationView> MemoryManager::Allocate(
    SessionId session, DeviceIndex device, StreamId stream, uint64_t size, bool shareable,
    absl::Span<const AllocationId> frees, absl::Span<const std::string> free_wait_event_handles,
    bool count_oom) {
  return AllocateWith(
      session, device, stream, frees, free_wait_event_handles, shareable,
      /*leased=*/false,
      [&] { return allocator_.Allocate(device, session, stream, size, shareable, count_oom); });
}

absl::StatusOr<AllocationView> MemoryManager::Lease(SessionId session, DeviceIndex device,
                                                    StreamId stream, uint64_t size, bool small_pool,
                                                    absl::Span<const AllocationId> frees,
                                                    bool count_oom) {
  return AllocateWith(
      session, device, stream, frees, {}, /*shareable=*/false, /*leased=*/true,
      [&] { return allocator_.Lease(device, session, stream, size, small_pool, count_oom); });
}

std::vector<SessionId> MemoryManager::PressureCandidates(SessionId session, DeviceIndex device,
                                                         Shortage shortage) const {
  if (shortage != Shortage::kDevice && shortage != Shortage::kTenantLimit) return {};
  if (!CheckDevice(device).ok()) return {};
  std::vector<SessionId> holders;
  {
    absl::MutexLock lock(&mu_);
    for (SessionId other : books_.SessionsWithLeases(device)) {
      if (other != session) holders.push_back(other);
    }
  }
  std::optional<std::string> tenant;
  if (shortage == Shortage::kTenantLimit) {
    std::optional<SessionRecord> info = sessions_->Get(session);
    if (!info.has_value()) return {};
    tenant = info->tenant;
  }
  std::vector<SessionId> out;
  for (SessionId other : holders) {
    if (tenant.has_value()) {
      std::optional<SessionRecord> info = sessions_->Get(other);
      if (!info.has_value() || info->tenant != *tenant) continue;
    }
    const CacheFigures figures = CacheFiguresOf(device, other);
    if (figures.reserved <= figures.allocated) continue;
    {
      absl::MutexLock lock(&mu_);
      auto open = open_.find(other);
      if (open == open_.end()) continue;
      // Nothing to give when last asked, and nothing changed since.
      if (open->second.fruitless[static_cast<size_t>(device.value())] == figures) continue;
    }
    out.push_back(other);
  }
  std::sort(out.begin(), out.end());
  return out;
}

absl::StatusOr<AllocationView> MemoryManager::AllocateWith(
    SessionId session, DeviceIndex device, StreamId stream, absl::Span<const AllocationId> frees,
    absl::Span<const std::string> free_wait_event_handles, bool shareable, bool leased,
    absl::FunctionRef<absl::StatusOr<AllocationResult>()> allocate) {
  // The allocator pools by the session's own stream ids: only check them.
  // The default stream always exists, so the common case takes no lock.
  GPUMUX_RETURN_IF_ERROR(CheckDevice(device));
  if (stream.value() != 0) GPUMUX_RETURN_IF_ERROR(streams_->CheckStream(session, device, stream));
  GPUMUX_RETURN_IF_ERROR(CheckFreeRequest(frees, free_wait_event_handles));
  // In flight from here: the session's end waits for this call, so the block
  // is in its books (and freed with them) before the allocator forgets it.
  GPUMUX_RETURN_IF_ERROR(BeginCall(session));
  bool ended = false;
  absl::Cleanup end_call = [&] {
    if (!ended) EndCall(session);
  };
  if (!frees.empty()) GPUMUX_RETURN_IF_ERROR(FreeChecked(session, frees, free_wait_event_handles));
  // The allocator has its own per-device lock; mu_ is not held across it so
  // sessions allocating on different devices do not wait for each other.
  GPUMUX_ASSIGN_OR_RETURN(AllocationResult result, allocate());
  // A block of an expandable segment reaches the client page by page; its
  // pages stay mapped while it lives.
  std::vector<PageHandle> pages;
  if (result.segment_handle->kind == SegmentHandle::Kind::kHostPages ||
      result.segment_handle->kind == SegmentHandle::Kind::kCudaPages) {
    absl::StatusOr<std::vector<PageHandle>> found =
        backend_->PageHandles(device, result.address, result.size);
    if (!found.ok()) {
      allocator_.Free(device, result.address);
      return found.status();
    }
    pages = *std::move(found);
  }
  AllocationView allocated{.device = device,
                           .requested_size = result.requested_size,
                           .size = result.size,
                           .address = result.address,
                           .segment_id = result.segment_id,
                           .segment_size = result.segment_size,
                           .offset = result.address - result.segment_address,
                           .segment_handle = std::move(result.segment_handle),
                           .pages = std::move(pages)};
  AllocationView view;
  {
    absl::MutexLock lock(&mu_);
    --open_.at(session).calls_in_flight;  // the books live while it is above 0
    ended = true;
    view = books_.AddBlock(session, std::move(allocated), shareable, leased);
  }
  subscribers_.Subscribe(session, device, view.segment_id);
  return view;
}

absl::Status MemoryManager::CheckFreeRequest(absl::Span<const AllocationId> ids,
                                             absl::Span<const std::string> wait_event_handles) {
  if (ids.size() > kMaxFreeIds) {
    return absl::InvalidArgumentError(absl::StrCat("a free request names ", ids.size(),
                                                   " allocations; at most ", kMaxFreeIds,
                                                   " may be freed in one request: split it"));
  }
  if (wait_event_handles.size() > kMaxWaitEventHandles) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a free request carries ", wait_event_handles.size(), " wait event handles; at most ",
        kMaxWaitEventHandles, " are accepted in one request: split it"));
  }
  for (const std::string& handle : wait_event_handles) {
    if (handle.size() != kIpcEventHandleBytes) {
      return absl::InvalidArgumentError(absl::StrCat("wait event handle of ", handle.size(),
                                                     " bytes: an interprocess event handle has ",
                                                     kIpcEventHandleBytes));
    }
  }
  // Linear, and before any lock: a long request must not stall others.
  absl::flat_hash_set<AllocationId> seen;
  seen.reserve(ids.size());
  for (AllocationId id : ids) {
    if (!seen.insert(id).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("allocation ", id.value(), " is named twice in one free request"));
    }
  }
  return absl::OkStatus();
}

absl::Status MemoryManager::Free(SessionId session, absl::Span<const AllocationId> ids,
                                 absl::Span<const std::string> wait_event_handles) {
  GPUMUX_RETURN_IF_ERROR(CheckFreeRequest(ids, wait_event_handles));
  return FreeChecked(session, ids, wait_event_handles);
}

absl::Status MemoryManager::FreeChecked(SessionId session, absl::Span<const AllocationId> ids,
                                        absl::Span<const std::string> wait_event_handles) {
  PendingFrees frees;
  {
    absl::MutexLock lock(&mu_);
    // Blocks the daemon works on in place (HoldAllocations) are freed after.
    struct Held {
      const AllocationBooks* books;
      absl::Span<const AllocationId> ids;
    } held{&books_, ids};
    mu_.Await(absl::Condition(
        +[](Held* h) { return h->books->NoneHeld(h->ids); }, &held));
    auto open = open_.find(session);
    if (open == open_.end()) return SessionClosedError(session);
    for (AllocationId id : ids) GPUMUX_RETURN_IF_ERROR(books_.Find(session, id).status());
    if (!wait_event_handles.empty())
      GPUMUX_RETURN_IF_ERROR(OpenWaitEventsLocked(session, ids, wait_event_handles, &frees));
    for (AllocationId id : ids) DropReferenceLocked(id, nullptr, &frees);
    ++open->second.calls_in_flight;
  }
  ApplyFrees(frees);
  EndCall(session);
  return absl::OkStatus();
}

absl::Status MemoryManager::BeginCall(SessionId session) {
  absl::MutexLock lock(&mu_);
  auto open = open_.find(session);
  if (open == open_.end()) return SessionClosedError(session);
  ++open->second.calls_in_flight;
  return absl::OkStatus();
}

void MemoryManager::EndCall(SessionId session) {
  absl::MutexLock lock(&mu_);
  --open_.at(session).calls_in_flight;  // the books live while it is above 0
}

void MemoryManager::ApplyFrees(const PendingFrees& frees) {
  for (size_t d = 0; d < frees.size(); ++d) {
    const DeviceFrees& device = frees[d];
    if (device.addresses.empty() && device.wait_for.empty()) continue;
    allocator_.FreeBatch(DeviceIndex(static_cast<int32_t>(d)), device.addresses, device.wait_for);
  }
}

absl::Status MemoryManager::OpenWaitEventsLocked(SessionId session,
                                                 absl::Span<const AllocationId> ids,
                                                 absl::Span<const std::string> handles,
                                                 PendingFrees* frees) {
  // Each handle is opened once per device whose blocks this free returns,
  // and shared by all of them. A block others still reference is not freed
  // here: its last holder's free decides.
  frees->resize(static_cast<size_t>(allocator_.device_count()));
  for (AllocationId id : ids) {
    const AllocationBooks::Block& block = **books_.Find(session, id);  // checked
    DeviceFrees& device = (*frees)[static_cast<size_t>(block.view.device.value())];
    if (block.refs.size() > 1 || !device.wait_for.empty()) continue;
    for (const std::string& handle : handles) {
      absl::StatusOr<BackendEvent> event = backend_->OpenIpcEventHandle(block.view.device, handle);
      if (!event.ok()) {
        for (DeviceFrees& opened : *frees) {
          for (BackendEvent e : opened.wait_for) backend_->DestroyEvent(e).IgnoreError();
          opened.wait_for.clear();
        }
        return absl::Status(
            event.status().code(),
            absl::StrCat("wait event handle: ", event.status().message(), "; nothing was freed"));
      }
      device.wait_for.push_back(*event);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<AllocationView> MemoryManager::Lookup(SessionId session, AllocationId id) const {
  absl::MutexLock lock(&mu_);
  return books_.Lookup(session, id);
}

void MemoryManager::RecordStreamLocked(const AllocationBooks::Block& block, SessionId session,
                                       const ResolvedStream& stream) {
  // The allocator knows the block's allocation stream by its allocating
  // session's id for it. Created stream ids are unique daemon-wide, but every
  // session's default stream is 0: another session's default stream gets an
  // id no stream has (top bit set), so it is never mistaken for the
  // allocation stream.
  StreamId as_known = stream.id;
  if (session != block.allocated_by && stream.id.value() == 0) {
    as_known = StreamId((uint64_t{1} << 63) | session.value());
  }
  allocator_.RecordStream(block.view.device, block.view.address, as_known, stream.backend);
}

absl::Status MemoryManager::RecordStream(SessionId session, AllocationId id, StreamId stream) {
  GPUMUX_ASSIGN_OR_RETURN(AllocationView view, Lookup(session, id));
  GPUMUX_ASSIGN_OR_RETURN(ResolvedStream resolved, streams_->Resolve(session, view.device, stream));
  absl::MutexLock lock(&mu_);
  // Freed meanwhile?
  GPUMUX_ASSIGN_OR_RETURN(const AllocationBooks::Block* block, books_.Find(session, id));
  RecordStreamLocked(*block, session, resolved);
  return absl::OkStatus();
}

absl::Status MemoryManager::EnqueueOnAllocations(
    SessionId session, absl::Span<const RangeUse> ranges, const ResolvedStream& stream,
    absl::FunctionRef<absl::Status(absl::Span<const DeviceSpan>)> enqueue) {
  return EnqueueOnAllocations(session, ranges, absl::MakeConstSpan(&stream, 1), enqueue);
}

absl::Status MemoryManager::EnqueueOnAllocations(
    SessionId session, absl::Span<const RangeUse> ranges, absl::Span<const ResolvedStream> streams,
    absl::FunctionRef<absl::Status(absl::Span<const DeviceSpan>)> enqueue) {
  absl::InlinedVector<DeviceSpan, 2> spans;
  absl::InlinedVector<const AllocationBooks::Block*, 2> blocks;
  absl::MutexLock lock(&mu_);
  for (const RangeUse& range : ranges) {
    GPUMUX_ASSIGN_OR_RETURN(const AllocationBooks::Block* block, books_.FindRange(session, range));
    spans.push_back(DeviceSpan{block->view.device, block->view.address + range.offset});
    blocks.push_back(block);
  }
  GPUMUX_RETURN_IF_ERROR(enqueue(spans));
  for (const AllocationBooks::Block* block : blocks) {
    for (const ResolvedStream& stream : streams) {
      if (block->view.device == stream.device) RecordStreamLocked(*block, session, stream);
    }
  }
  return absl::OkStatus();
}

absl::Status MemoryManager::HoldAllocations(
    SessionId session, absl::Span<const RangeUse> ranges,
    absl::FunctionRef<absl::Status(absl::Span<const DeviceSpan>)> use) {
  absl::InlinedVector<DeviceSpan, 2> spans;
  absl::InlinedVector<AllocationBooks::Block*, 2> blocks;
  {
    absl::MutexLock lock(&mu_);
    auto open = open_.find(session);
    if (open == open_.end()) return SessionClosedError(session);
    for (const RangeUse& range : ranges) {
      GPUMUX_ASSIGN_OR_RETURN(AllocationBooks::Block * block, books_.FindRange(session, range));
      spans.push_back(DeviceSpan{block->view.device, block->view.address + range.offset});
      blocks.push_back(block);
    }
    for (AllocationBooks::Block* block : blocks) ++block->holds;
    ++open->second.calls_in_flight;  // the session's end waits for the use
  }
  const absl::Status used = use(spans);
  absl::MutexLock lock(&mu_);
  for (AllocationBooks::Block* block : blocks) --block->holds;
  OpenSession& open = open_.at(session);  // it lives while the call is in flight
  --open.calls_in_flight;
  if (used.ok() && open.ending) return SessionClosedError(session);
  return used;
}

void MemoryManager::DropReferenceLocked(AllocationId id, ReleaseSummary* summary,
                                        PendingFrees* frees) {
  const AllocationBooks::Dropped dropped = books_.DropReference(id);
  if (dropped.last) {
    if (summary != nullptr) {
      if (dropped.imported) {
        ++summary->imports_dropped;
      } else {
        ++summary->allocations;
        summary->allocated_bytes += dropped.size;
      }
    }
    tokens_.Forget(dropped.block);
    if (frees->empty()) frees->resize(static_cast<size_t>(allocator_.device_count()));
    (*frees)[static_cast<size_t>(dropped.device.value())].addresses.push_back(dropped.address);
    return;
  }
  if (summary != nullptr && dropped.imported) ++summary->imports_dropped;
  if (dropped.heir.has_value()) {
    if (summary != nullptr) {
      ++summary->handed_over;
      summary->handed_over_bytes += dropped.segment_size;
    }
    allocator_.Recharge(dropped.device, dropped.address, *dropped.heir);
  }
}

absl::StatusOr<std::string> MemoryManager::Share(SessionId session, AllocationId id) {
  absl::MutexLock lock(&mu_);
  GPUMUX_ASSIGN_OR_RETURN(const AllocationBooks::Block* block, books_.Find(session, id));
  if (!block->shareable) {
    return absl::FailedPreconditionError(
        absl::StrCat("allocation ", id.value(),
                     " is not shareable: its segment may hold other allocations; allocate it with "
                     "shareable=true to share it"));
  }
  return tokens_.Issue(block->id, id, open_.at(session).share_tenant);
}

absl::StatusOr<AllocationView> MemoryManager::Import(SessionId session, absl::string_view token) {
  // Before the lock, and before a closed session's UNAUTHENTICATED.
  GPUMUX_RETURN_IF_ERROR(ShareTokens::CheckFormat(token));
  AllocationView view;
  {
    absl::MutexLock lock(&mu_);
    if (!open_.contains(session)) return SessionClosedError(session);
    GPUMUX_ASSIGN_OR_RETURN(BlockId block, tokens_.Redeem(token));
    view = books_.AddImport(session, block);
  }
  subscribers_.Subscribe(session, view.device, view.segment_id);
  return view;
}

ReleaseSummary MemoryManager::ReleaseSession(SessionId session) {
  ReleaseSummary summary;
  if (pages_ != nullptr) pages_->Remove(session);
  // Segments this session leaves behind: all charged to it before the frees,
  // less whatever stays charged (handed over to importers) afterwards.
  std::vector<DeviceStats> before;
  for (int d = 0; d < allocator_.device_count(); ++d) {
    before.push_back(allocator_.GetClientStats(DeviceIndex(d), session));
  }
  PendingFrees frees;
  {
    absl::MutexLock lock(&mu_);
    auto open = open_.find(session);
    if (open != open_.end()) {
      // A Free of this session still handing its blocks to the allocator, or
      // an Allocate still getting one, finishes first: RemoveClient below
      // wants every block back.
      OpenSession* mine = &open->second;
      mine->ending = true;
      mu_.Await(absl::Condition(
          +[](OpenSession* o) { return o->calls_in_flight == 0; }, mine));
      for (AllocationId id : books_.SessionIds(session)) DropReferenceLocked(id, &summary, &frees);
      books_.RemoveSession(session);
      open_.erase(session);
    }
  }
  ApplyFrees(frees);
  // Everything charged to the session goes back to the backend, except the
  // segments of shared allocations handed over to their importers.
  for (const DeviceStats& stats : before) {
    summary.segments += static_cast<uint64_t>(stats.segment[kAggregate].current);
    summary.reserved_bytes += static_cast<uint64_t>(stats.reserved_bytes[kAggregate].current);
  }
  summary.segments -= summary.handed_over;
  summary.reserved_bytes -= summary.handed_over_bytes;
  allocator_.RemoveClient(session);
  return summary;
}

absl::StatusOr<EmptyCacheResult> MemoryManager::EmptyCache(SessionId session,
                                                           std::optional<DeviceIndex> device,
                                                           bool all_sessions) {
  if (device.has_value()) GPUMUX_RETURN_IF_ERROR(CheckDevice(*device));
  return allocator_.EmptyCache(device,
                               all_sessions ? std::nullopt : std::optional<ClientId>(session));
}

absl::StatusOr<uint64_t> MemoryManager::SetMemoryLimit(SessionId session, DeviceIndex device,
                                                       const MemoryLimit& limit) {
  GPUMUX_RETURN_IF_ERROR(CheckDevice(device));
  GPUMUX_ASSIGN_OR_RETURN(uint64_t bytes,
                          LimitInBytes(limit, backend_->device_info(device).total_memory));
  allocator_.SetMemoryLimit(device, session, bytes);
  return bytes;
}

absl::StatusOr<DeviceStats> MemoryManager::GetStats(DeviceIndex device,
                                                    std::optional<SessionId> session) const {
  GPUMUX_RETURN_IF_ERROR(CheckDevice(device));
  if (!session.has_value()) {
    DeviceStats stats = allocator_.GetStats(device);
    if (pages_ == nullptr) return stats;
    for (SessionId with_page : pages_->Sessions()) {
      const int64_t reserved =
          allocator_.GetClientStats(device, with_page).reserved_bytes[kAggregate].current;
      if (std::optional<StatsPageFigures> local = pages_->Read(with_page, device, reserved)) {
        stats = MergeLocalStats(stats, local->device);
      }
    }
    return pages_->Settle(device, stats);
  }
  if (!sessions_->IsOpen(*session)) {
    return absl::NotFoundError(absl::StrCat("session ", session->value(), " not found"));
  }
  return SessionStatsWithPage(device, *session);
}

std::vector<TenantUsage> MemoryManager::ListTenants() const {
  std::vector<TenantUsage> tenants = allocator_.ListTenants(std::nullopt);
  if (pages_ == nullptr) return tenants;
  for (TenantUsage& usage : tenants) {
    uint64_t allocated = 0;
    for (ClientId client : usage.clients) {
      const DeviceStats stats = SessionStatsWithPage(usage.device, SessionId(client.value()));
      allocated += static_cast<uint64_t>(stats.allocated_bytes[kAggregate].current);
    }
    usage.allocated_bytes = allocated;
  }
  return tenants;
}

uint64_t MemoryManager::BlocksVersion(SessionId session) const {
  uint64_t version = 0;
  for (int d = 0; d < allocator_.device_count(); ++d) {
    const DeviceStats stats = SessionStatsWithPage(DeviceIndex(d), session);
    for (const StatArray* counted : {&stats.allocation, &stats.active, &stats.segment}) {
      version += static_cast<uint64_t>((*counted)[kAggregate].allocated) +
                 static_cast<uint64_t>((*counted)[kAggregate].freed);
    }
  }
  return version;
}

void MemoryManager::AskToRelease(DeviceIndex device, absl::Span<const SessionId> holders,
                                 absl::FunctionRef<void()> ask) {
  std::vector<CacheFigures> before;
  before.reserve(holders.size());
  for (SessionId holder : holders) before.push_back(CacheFiguresOf(device, holder));
  ask();
  for (size_t i = 0; i < holders.size(); ++i) {
    const CacheFigures after = CacheFiguresOf(device, holders[i]);
    if (after.reserved < before[i].reserved) continue;  // it gave something back
    absl::MutexLock lock(&mu_);
    auto open = open_.find(holders[i]);
    if (open != open_.end()) open->second.fruitless[static_cast<size_t>(device.value())] = after;
  }
}

MemoryManager::CacheFigures MemoryManager::CacheFiguresOf(DeviceIndex device,
                                                          SessionId session) const {
  const DeviceStats stats = SessionStatsWithPage(device, session);
  return CacheFigures{.reserved = stats.reserved_bytes[kAggregate].current,
                      .allocated = stats.allocated_bytes[kAggregate].current,
                      .active = stats.active_bytes[kAggregate].current};
}

DeviceStats MemoryManager::SessionStatsWithPage(DeviceIndex device, SessionId session) const {
  DeviceStats stats = allocator_.GetClientStats(device, session);
  if (pages_ == nullptr) return stats;
  std::optional<StatsPageFigures> local =
      pages_->Read(session, device, stats.reserved_bytes[kAggregate].current);
  return local.has_value() ? MergeLocalStats(stats, local->session) : stats;
}

absl::StatusOr<StatsPageInfo> MemoryManager::GetStatsPage(SessionId session) {
  if (pages_ == nullptr) {
    return absl::FailedPreconditionError("this daemon passes no memory files: no stats pages");
  }
  if (!sessions_->IsOpen(session)) {
    return absl::NotFoundError(absl::StrCat("session ", session.value(), " not found"));
  }
  return pages_->GetOrCreate(session);
}

bool MemoryManager::HasStatsPage(SessionId session) const {
  return pages_ != nullptr && pages_->Has(session);
}

bool MemoryManager::StatsPageRejected(SessionId session) const {
  return pages_ != nullptr && pages_->Rejected(session);
}

absl::Status MemoryManager::ResetPeakStats(SessionId session, DeviceIndex device) {
  GPUMUX_RETURN_IF_ERROR(CheckDevice(device));
  allocator_.ResetPeakStats(device, session);
  return absl::OkStatus();
}

absl::Status MemoryManager::ResetAccumulatedStats(SessionId session, DeviceIndex device) {
  GPUMUX_RETURN_IF_ERROR(CheckDevice(device));
  allocator_.ResetAccumulatedStats(device, session);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<SegmentSnapshot>> MemoryManager::Snapshot(
    std::optional<DeviceIndex> device, std::optional<SessionId> session) const {
  if (device.has_value()) GPUMUX_RETURN_IF_ERROR(CheckDevice(*device));
  if (session.has_value() && !sessions_->IsOpen(*session)) {
    return absl::NotFoundError(absl::StrCat("session ", session->value(), " not found"));
  }
  return allocator_.Snapshot(device, session);
}

ShareCounts MemoryManager::share_counts() const {
  absl::MutexLock lock(&mu_);
  return tokens_.counts();
}

std::vector<SessionDeviceBooks> MemoryManager::Usage(SessionId session) const {
  std::vector<uint64_t> imported;
  {
    absl::MutexLock lock(&mu_);
    imported = books_.ImportedBytes(session);
  }
  std::vector<SessionDeviceBooks> out;
  for (int d = 0; d < allocator_.device_count(); ++d) {
    DeviceIndex device(d);
    DeviceStats stats = SessionStatsWithPage(device, session);
    SessionDeviceBooks usage;
    usage.device = device;
    usage.allocated_bytes = static_cast<uint64_t>(stats.allocated_bytes[kAggregate].current);
    usage.reserved_bytes = static_cast<uint64_t>(stats.reserved_bytes[kAggregate].current);
    usage.allocations = static_cast<uint64_t>(stats.allocation[kAggregate].current);
    usage.imported_bytes =
        static_cast<size_t>(d) < imported.size() ? imported[static_cast<size_t>(d)] : 0;
    usage.limit_bytes = allocator_.GetMemoryLimit(device, session);
    usage.peak_allocated_bytes = static_cast<uint64_t>(stats.allocated_bytes[kAggregate].peak);
    usage.peak_reserved_bytes = static_cast<uint64_t>(stats.reserved_bytes[kAggregate].peak);
    out.push_back(usage);
  }
  return out;
}

}  // namespace gpumux
