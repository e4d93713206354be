#include "server/core/group_registry.h"

#include <algorithm>
#include <deque>
#include <future>
#include <thread>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/core/tenant_shares.h"
#include "spdlog/spdlog.h"

namespace gpumux {
namespace {

// Peers probed at once when a collective failed.
constexpr size_t kProbeBatch = 64;
constexpr absl::Duration kMaxProbeTime = absl::Seconds(2);
// A group keeps its staging buffer between collectives up to this size.
constexpr size_t kMaxKeptStaging = size_t{256} << 20;

}  // namespace

std::string RendezvousName(GroupRef group) {
  if (group.tenant.empty()) return std::string(group.name);
  return absl::StrCat(group.name, "@", group.tenant);
}

std::string GroupLabel(GroupRef group) {
  if (group.tenant.empty()) return absl::StrCat("group \"", group.name, "\"");
  return absl::StrCat("group \"", group.name, "\" of tenant '", group.tenant, "'");
}

namespace {

GroupRef RefOf(const GroupSpec& spec) { return GroupRef{spec.tenant, spec.name}; }

}  // namespace

struct GroupRegistry::Group {
  // A collective queued by Queue, with its turn.
  struct Queued {
    uint64_t ticket = 0;
    std::string collective;
    uint64_t bytes = 0;
    QueuedBody body;
    QueuedDone done;
  };

  GroupSpec spec;
  uint64_t generation = 0;
  std::vector<GroupMemberInfo> members;
  absl::Time formed_at;
  absl::Duration form_time;
  bool device_communicator = false;

  // Held while a collective runs, and to close the group.
  absl::Mutex run_mu;
  std::unique_ptr<GroupTransport> transport ABSL_GUARDED_BY(run_mu);
  bool closed ABSL_GUARDED_BY(run_mu) = false;
  std::vector<char> staging ABSL_GUARDED_BY(run_mu);

  mutable absl::Mutex stats_mu;
  bool broken ABSL_GUARDED_BY(stats_mu) = false;
  std::string error ABSL_GUARDED_BY(stats_mu);
  uint64_t collectives ABSL_GUARDED_BY(stats_mu) = 0;
  uint64_t bytes ABSL_GUARDED_BY(stats_mu) = 0;

  // The order of the group's collectives: each takes a ticket when called
  // (Run) or queued (Queue) and runs once `serving` reaches it.
  absl::Mutex order_mu;
  absl::CondVar turn_cv;  // `serving` or `queued` changed, or `closing`
  uint64_t next_ticket ABSL_GUARDED_BY(order_mu) = 0;
  uint64_t serving ABSL_GUARDED_BY(order_mu) = 0;
  std::deque<Queued> queued ABSL_GUARDED_BY(order_mu);
  bool closing ABSL_GUARDED_BY(order_mu) = false;
  // Runs `queued`; started by the first Queue, joined by CloseTransport.
  std::thread queue_thread ABSL_GUARDED_BY(order_mu);

  void AwaitTurn(uint64_t ticket) ABSL_EXCLUSIVE_LOCKS_REQUIRED(order_mu) {
    while (serving != ticket) turn_cv.Wait(&order_mu);
  }
  void EndTurn() {
    absl::MutexLock lock(&order_mu);
    ++serving;
    turn_cv.SignalAll();
  }

  // Waits for a running collective, then drops the transport; the group's
  // thread then finds the group closed, drops what is queued and ends.
  void CloseTransport() {
    {
      absl::MutexLock lock(&order_mu);
      closing = true;
      turn_cv.SignalAll();
    }
    {
      absl::MutexLock lock(&run_mu);
      closed = true;
      transport.reset();
      staging = std::vector<char>();
    }
    std::thread thread;
    {
      absl::MutexLock lock(&order_mu);
      thread = std::move(queue_thread);
    }
    if (thread.joinable()) thread.join();
  }
};

char* GroupRegistry::Member::Staging(uint64_t bytes) {
  if (staging_->size() < bytes) {
    *staging_ = std::vector<char>();  // the old one goes first
    staging_->resize(bytes);
  }
  return staging_->data();
}

GroupRegistry::~GroupRegistry() { Close(); }

void GroupRegistry::Close() {
  absl::flat_hash_map<std::string, std::shared_ptr<Group>> groups;
  {
    absl::MutexLock lock(&mu_);
    closed_ = true;
    groups.swap(groups_);
  }
  for (auto& [name, group] : groups) group->CloseTransport();
}

GroupInfoView GroupRegistry::View(const Group& group) {
  GroupInfoView view{.spec = group.spec,
                     .generation = group.generation,
                     .members = group.members,
                     .formed_at = group.formed_at,
                     .form_time = group.form_time,
                     .device_communicator = group.device_communicator};
  absl::MutexLock lock(&group.stats_mu);
  view.broken = group.broken;
  view.error = group.error;
  view.collectives = group.collectives;
  view.bytes = group.bytes;
  return view;
}

absl::StatusOr<GroupInfoView> GroupRegistry::Form(const GroupSpec& spec) {
  if (absl::Status status = CheckGroupName(spec.name); !status.ok()) return status;
  if (absl::Status status = CheckGroupRank(spec.world_size, spec.rank); !status.ok()) {
    return status;
  }
  if (spec.rank != 0 && spec.rendezvous_address.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", spec.rank, " of ", GroupLabel(RefOf(spec)),
                     " needs the rendezvous address: rank 0's daemon's HOST:PORT"));
  }
  if (spec.timeout <= absl::ZeroDuration() || spec.timeout > kMaxGroupTimeout) {
    return absl::InvalidArgumentError(absl::StrCat("a group timeout is positive and at most ",
                                                   absl::FormatDuration(kMaxGroupTimeout)));
  }
  if (spec.rank == 0 && spec.world_size > 1 && !hooks_.serves_rendezvous) {
    return absl::FailedPreconditionError(absl::StrCat(
        "rank 0 of ", GroupLabel(RefOf(spec)), " (world size ", spec.world_size,
        ") serves the rendezvous to the other daemons: start gpumuxd with --listen and "
        "--tcp-mode=full (TLS and the group's token)"));
  }
  const std::string key = RendezvousName(RefOf(spec));
  // A group of the same name ends first: its members are forming anew.
  std::shared_ptr<Group> old;
  {
    absl::MutexLock lock(&mu_);
    if (closed_) return absl::UnavailableError("the daemon is shutting down");
    auto it = groups_.find(key);
    if (it != groups_.end()) {
      old = std::move(it->second);
      groups_.erase(it);
    } else if (groups_.size() >= kMaxGroups) {
      return absl::ResourceExhaustedError(absl::StrCat("this daemon is in ", kMaxGroups,
                                                       " groups already: destroy one to form ",
                                                       GroupLabel(RefOf(spec))));
    } else if (absl::Status share = CheckTenantShareLocked(spec); !share.ok()) {
      return share;
    }
  }
  if (old != nullptr) old->CloseTransport();

  const absl::Time start = absl::Now();
  std::unique_ptr<RendezvousPoint> remote;
  RendezvousPoint* rendezvous = store_;
  if (spec.rank != 0) {
    absl::StatusOr<std::unique_ptr<RendezvousPoint>> connected =
        hooks_.connect_rendezvous(spec.rendezvous_address);
    if (!connected.ok()) return connected.status();
    remote = *std::move(connected);
    rendezvous = remote.get();
  }
  absl::StatusOr<RendezvousRound> round =
      rendezvous->Join(key, spec.world_size, spec.rank, hooks_.own_address(), spec.timeout);
  if (!round.ok()) return round.status();
  absl::StatusOr<std::unique_ptr<GroupTransport>> transport =
      hooks_.connect_transport(*rendezvous, spec, round->generation);
  if (!transport.ok()) {
    return absl::Status(
        transport.status().code(),
        absl::StrCat(GroupLabel(RefOf(spec)), " (rank ", spec.rank, " of ", spec.world_size,
                     ", round ", round->generation,
                     "): connecting the members failed: ", transport.status().message()));
  }
  auto group = std::make_shared<Group>();
  group->spec = spec;
  group->generation = round->generation;
  group->members = std::move(round->members);
  group->formed_at = absl::Now();
  group->form_time = group->formed_at - start;
  group->device_communicator = (*transport)->device_communicator() != nullptr;
  {
    absl::MutexLock run(&group->run_mu);
    group->transport = *std::move(transport);
  }
  GroupInfoView view = View(*group);
  {
    absl::MutexLock lock(&mu_);
    if (closed_) {
      group->CloseTransport();
      return absl::UnavailableError("the daemon is shutting down");
    }
    std::shared_ptr<Group>& slot = groups_[key];
    // Formed concurrently by another call: the newer one stays.
    if (slot != nullptr) old = std::move(slot);
    slot = group;
  }
  if (old != nullptr) old->CloseTransport();
  spdlog::info("{}: rank {} of {}, round {}, formed in {} by session {}", GroupLabel(RefOf(spec)),
               spec.rank, spec.world_size, view.generation, absl::FormatDuration(view.form_time),
               spec.owner.value());
  return view;
}

absl::Status GroupRegistry::CheckTenantShareLocked(const GroupSpec& spec) const {
  size_t held = 0;
  for (const auto& [key, group] : groups_) held += group->spec.tenant == spec.tenant ? 1 : 0;
  if (held < kMaxGroupsPerTenant) return absl::OkStatus();
  return absl::ResourceExhaustedError(
      absl::StrCat(TenantLabel(spec.tenant), spec.tenant.empty() ? " hold " : " holds ", held,
                   " groups, a tenant's share (a quarter of the daemon's ", kMaxGroups,
                   "): destroy one to form ", GroupLabel(RefOf(spec))));
}

absl::Status GroupRegistry::Destroy(GroupRef ref) {
  std::shared_ptr<Group> group;
  {
    absl::MutexLock lock(&mu_);
    auto it = groups_.find(RendezvousName(ref));
    if (it == groups_.end()) {
      return absl::NotFoundError(absl::StrCat("this daemon is in no ", GroupLabel(ref)));
    }
    group = std::move(it->second);
    groups_.erase(it);
  }
  group->CloseTransport();
  spdlog::info("{}: destroyed", GroupLabel(ref));
  return absl::OkStatus();
}

void GroupRegistry::SessionEnded(SessionId session) {
  std::vector<std::shared_ptr<Group>> ended;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = groups_.begin(); it != groups_.end();) {
      if (it->second->spec.owner == session) {
        ended.push_back(std::move(it->second));
        groups_.erase(it++);
      } else {
        ++it;
      }
    }
  }
  for (const std::shared_ptr<Group>& group : ended) {
    group->CloseTransport();
    spdlog::info("{}: ended with session {}, which formed it", GroupLabel(RefOf(group->spec)),
                 session.value());
  }
}

std::vector<GroupInfoView> GroupRegistry::List() const {
  std::vector<std::shared_ptr<Group>> groups;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [name, group] : groups_) groups.push_back(group);
  }
  std::vector<GroupInfoView> views;
  views.reserve(groups.size());
  for (const auto& group : groups) views.push_back(View(*group));
  std::sort(views.begin(), views.end(), [](const GroupInfoView& a, const GroupInfoView& b) {
    return std::tie(a.spec.tenant, a.spec.name) < std::tie(b.spec.tenant, b.spec.name);
  });
  return views;
}

std::shared_ptr<GroupRegistry::Group> GroupRegistry::Find(GroupRef group) const {
  const std::string key = RendezvousName(group);
  absl::MutexLock lock(&mu_);
  auto it = groups_.find(key);
  return it == groups_.end() ? nullptr : it->second;
}

namespace {

absl::Status NoGroup(GroupRef group) {
  return absl::NotFoundError(absl::StrCat("this daemon is in no ", GroupLabel(group)));
}
absl::Status GroupClosed(GroupRef group) {
  return absl::FailedPreconditionError(
      absl::StrCat(GroupLabel(group), " was formed again or destroyed during the call"));
}
absl::Status GroupBroken(GroupRef group, absl::string_view error) {
  return absl::FailedPreconditionError(
      absl::StrCat(GroupLabel(group), " is broken; form it again. It broke with: ", error));
}

}  // namespace

absl::Status GroupRegistry::Run(GroupRef name, absl::string_view collective, uint64_t bytes,
                                absl::FunctionRef<absl::Status(Member&)> body) {
  const std::shared_ptr<Group> group = Find(name);
  if (group == nullptr) return NoGroup(name);
  {
    absl::MutexLock lock(&group->order_mu);
    group->AwaitTurn(group->next_ticket++);
  }
  const absl::Status status = RunTurn(*group, collective, bytes, body);
  group->EndTurn();
  return status;
}

absl::Status GroupRegistry::Queue(GroupRef name, absl::string_view collective, uint64_t bytes,
                                  absl::FunctionRef<absl::Status(int rank, int world_size)> check,
                                  QueuedBody body, QueuedDone done) {
  const std::shared_ptr<Group> group = Find(name);
  if (group == nullptr) return NoGroup(name);
  absl::MutexLock lock(&group->order_mu);
  if (group->closing) return GroupClosed(name);
  {
    absl::MutexLock stats(&group->stats_mu);
    if (group->broken) return GroupBroken(name, group->error);
  }
  if (absl::Status checked = check(group->spec.rank, group->spec.world_size); !checked.ok()) {
    return checked;
  }
  if (!group->queue_thread.joinable()) {
    // CloseTransport joins it before the group goes, and the registry
    // closes every group before it goes.
    group->queue_thread = std::thread([this, g = group.get()] { ServeQueue(*g); });
  }
  group->queued.push_back(Group::Queued{.ticket = group->next_ticket++,
                                        .collective = std::string(collective),
                                        .bytes = bytes,
                                        .body = std::move(body),
                                        .done = std::move(done)});
  group->turn_cv.SignalAll();
  return absl::OkStatus();
}

void GroupRegistry::ServeQueue(Group& group) {
  while (true) {
    Group::Queued next;
    {
      absl::MutexLock lock(&group.order_mu);
      while (group.queued.empty() && !group.closing) group.turn_cv.Wait(&group.order_mu);
      if (group.queued.empty()) return;  // closing, and nothing is left
      next = std::move(group.queued.front());
      group.queued.pop_front();
      group.AwaitTurn(next.ticket);
    }
    const absl::Status status = RunTurn(group, next.collective, next.bytes, [&](Member& member) {
      return std::move(next.body)(member);
    });
    // Told first: what the body holds (a stream) goes on once it goes, and
    // whoever waits for that may look for the status.
    if (next.done) std::move(next.done)(status);
    next.body = nullptr;  // what it held (memory, a stream) goes now
    bool broken = false;
    {
      absl::MutexLock lock(&group.stats_mu);
      broken = group.broken;  // RunTurn logged why
    }
    if (!status.ok() && !broken) {
      spdlog::warn("{}: a queued {} failed: {}", GroupLabel(RefOf(group.spec)), next.collective,
                   std::string(status.message()));
    }
    group.EndTurn();
  }
}

absl::Status GroupRegistry::RunTurn(Group& group, absl::string_view collective, uint64_t bytes,
                                    absl::FunctionRef<absl::Status(Member&)> body) {
  const GroupRef name = RefOf(group.spec);
  absl::MutexLock run(&group.run_mu);
  if (group.closed) return GroupClosed(name);
  {
    absl::MutexLock lock(&group.stats_mu);
    if (group.broken) return GroupBroken(name, group.error);
  }
  Member member;
  member.rank_ = group.spec.rank;
  member.world_size_ = group.spec.world_size;
  member.timeout_ = group.spec.timeout;
  member.transport_ = group.transport.get();
  member.staging_ = &group.staging;
  absl::Status status = body(member);
  if (group.staging.size() > kMaxKeptStaging) group.staging = std::vector<char>();
  if (status.ok()) {
    absl::MutexLock lock(&group.stats_mu);
    ++group.collectives;
    group.bytes += bytes;
    return status;
  }
  if (!member.failed_) return status;  // the session's side: the group is fine
  // The transport is unusable now. Closing it at once ends the peers' waits
  // on this member too (their connections to it close), so that every
  // member fails as soon as one does rather than at its own timeout.
  group.transport.reset();
  // The probes take up to kMaxProbeTime: listing the groups does not wait.
  status = Diagnose(group, collective, status);
  {
    absl::MutexLock lock(&group.stats_mu);
    group.broken = true;
    group.error = std::string(status.message());
  }
  spdlog::warn("{}", std::string(status.message()));
  return status;
}

absl::Status GroupRegistry::Diagnose(const Group& group, absl::string_view collective,
                                     const absl::Status& failure) const {
  const std::string what =
      absl::StrCat(GroupLabel(RefOf(group.spec)), " (rank ", group.spec.rank, " of ",
                   group.spec.world_size, "): ", collective, " failed");
  std::vector<const GroupMemberInfo*> peers;
  for (const GroupMemberInfo& member : group.members) {
    if (member.rank != group.spec.rank && !member.address.empty()) peers.push_back(&member);
  }
  const absl::Duration probe_time = std::min(group.spec.timeout, kMaxProbeTime);
  std::vector<std::string> unreachable;
  for (size_t first = 0; first < peers.size(); first += kProbeBatch) {
    std::vector<std::future<bool>> answers;
    const size_t end = std::min(peers.size(), first + kProbeBatch);
    for (size_t i = first; i < end; ++i) {
      answers.push_back(std::async(std::launch::async, [this, peer = peers[i], probe_time] {
        return hooks_.probe(peer->address, probe_time);
      }));
    }
    for (size_t i = first; i < end; ++i) {
      if (!answers[i - first].get()) {
        unreachable.push_back(absl::StrCat("rank ", peers[i]->rank, " (", peers[i]->address, ")"));
      }
    }
  }
  if (!unreachable.empty()) {
    return absl::UnavailableError(absl::StrCat(
        what, ": peer ", absl::StrJoin(unreachable, ", peer "),
        unreachable.size() == 1 ? " is" : " are", " unreachable (", failure.message(), ")"));
  }
  return absl::Status(failure.code(),
                      absl::StrCat(what, ": ", failure.message(),
                                   peers.empty() ? ""
                                                 : " (every peer daemon answers: one did not run "
                                                   "the same collective in time, or left the "
                                                   "group)"));
}

}  // namespace gpumux
