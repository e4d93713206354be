#include "server/core/client_queries.h"

#include <string>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"

namespace gpumux {
namespace {

// Why `answer`'s blocks cannot stand for `segment`'s; "" when they can.
std::string CheckTiling(const SegmentSnapshot& segment, const SegmentSnapshot& answer) {
  if (!answer.blocks_unavailable.empty()) return answer.blocks_unavailable;
  if (answer.blocks.empty()) return "it listed no blocks";
  uint64_t next = segment.address;
  for (const BlockSnapshot& block : answer.blocks) {
    if (block.address != next) {
      return absl::StrCat("a block at ", block.address, " where one at ", next, " was due");
    }
    if (block.size == 0 || block.size % kMinBlockSize != 0 ||
        block.size > segment.address + segment.total_size - block.address) {
      return absl::StrCat("the block at ", block.address, " has ", block.size,
                          " bytes, which do not fit the segment in 512-byte units");
    }
    if (block.requested_size > block.size) {
      return absl::StrCat("the block at ", block.address, " has ", block.requested_size,
                          " bytes requested of its ", block.size);
    }
    next = block.address + block.size;
  }
  if (next != segment.address + segment.total_size) {
    return absl::StrCat("its blocks end at ", next, ", before the segment's end");
  }
  return "";
}

}  // namespace

template <typename Ask>
ClientQueries::Pending ClientQueries::AskAndWait(absl::Span<const SessionId> sessions,
                                                 absl::Time deadline, Ask ask) {
  uint64_t request;
  std::vector<SessionId> asked;
  {
    absl::MutexLock lock(&mu_);
    request = next_request_++;
    Pending& pending = pending_[request];
    for (SessionId session : sessions) {
      if (unresponsive_.contains(session)) {
        pending.missing[session] =
            "was not asked: it let an earlier question pass its deadline and has answered "
            "nothing since";
        continue;
      }
      pending.waiting.insert(session);
      asked.push_back(session);
    }
  }
  // Asked outside the lock: a sink queues a message and returns, but an
  // answer may come back before the next session is asked.
  for (SessionId session : asked) {
    std::shared_ptr<NoticeSink> sink = sessions_->SinkOf(session);
    if (sink != nullptr) {
      ask(*sink, request);
    } else {
      OnSessionClosed(session);
    }
  }
  absl::MutexLock lock(&mu_);
  const Pending& pending = pending_.at(request);
  auto answered = [&pending] { return pending.waiting.empty(); };  // called under mu_
  mu_.AwaitWithDeadline(absl::Condition(&answered), deadline);
  unresponsive_.insert(pending.waiting.begin(), pending.waiting.end());
  auto node = pending_.extract(request);
  return std::move(node.mapped());
}

size_t ClientQueries::ReleaseCached(absl::Span<const SessionId> sessions, DeviceIndex device,
                                    absl::Time deadline) {
  if (sessions.empty()) return 0;
  return AskAndWait(
             sessions, deadline,
             [&](NoticeSink& sink, uint64_t request) { sink.AskReleaseCached(request, device); })
      .answered;
}

ClientQueries::LeaseBlocksAnswers ClientQueries::LeaseBlocks(
    absl::Span<const SessionId> sessions, absl::Time deadline,
    absl::FunctionRef<uint64_t(SessionId)> version) {
  if (sessions.empty()) return {};
  // Read before asking: an allocation meanwhile makes the answer stale.
  absl::flat_hash_map<SessionId, uint64_t> versions;
  for (SessionId session : sessions) versions[session] = version(session);
  LeaseBlocksAnswers answers;
  std::vector<SessionId> ask;
  {
    absl::MutexLock lock(&mu_);
    // One question out at a time: its answers serve the askers behind it.
    auto free = [this] { return !blocks_question_out_; };  // called under mu_
    if (!mu_.AwaitWithDeadline(absl::Condition(&free), deadline)) {
      for (SessionId session : sessions) {
        answers.missing[session] = "was not asked: another snapshot's question was still out";
      }
      return answers;
    }
    const absl::Time now = absl::Now();
    for (auto it = answered_.begin(); it != answered_.end();) {
      if (now - it->second.at >= answer_reuse_) {
        answered_.erase(it++);
      } else {
        ++it;
      }
    }
    for (SessionId session : sessions) {
      auto it = answered_.find(session);
      if (it != answered_.end() && it->second.version == versions[session]) {
        answers.blocks[session] = it->second.segments;
      } else {
        ask.push_back(session);
      }
    }
    if (ask.empty()) return answers;
    blocks_question_out_ = true;
  }
  Pending pending = AskAndWait(
      ask, deadline, [](NoticeSink& sink, uint64_t request) { sink.AskLeaseBlocks(request); });
  // Answers still in parts at the deadline are incomplete: drop them.
  for (SessionId session : pending.waiting) pending.blocks.erase(session);
  absl::MutexLock lock(&mu_);
  blocks_question_out_ = false;
  const absl::Time now = absl::Now();
  for (auto& [session, segments] : pending.blocks) {
    // Kept at most answer_reuse_ (each LeaseBlocks drops older ones), so a
    // session that ended meanwhile leaves nothing for long.
    if (answer_reuse_ > absl::ZeroDuration())
      answered_[session] = Answered{segments, now, versions[session]};
    answers.blocks[session] = std::move(segments);
  }
  for (auto& [session, why] : pending.missing) answers.missing[session] = std::move(why);
  return answers;
}

void ClientQueries::OnCacheReleased(SessionId session, uint64_t request) {
  absl::MutexLock lock(&mu_);
  unresponsive_.erase(session);
  auto it = pending_.find(request);
  if (it == pending_.end() || it->second.waiting.erase(session) == 0) return;
  ++it->second.answered;
}

void ClientQueries::OnLeaseBlocks(SessionId session, uint64_t request,
                                  std::vector<SegmentSnapshot> segments, bool last) {
  absl::MutexLock lock(&mu_);
  if (last) unresponsive_.erase(session);
  auto it = pending_.find(request);
  if (it == pending_.end() || !it->second.waiting.contains(session)) return;
  Pending& pending = it->second;
  std::vector<SegmentSnapshot>& answer = pending.blocks[session];
  size_t& blocks = pending.block_counts[session];
  for (const SegmentSnapshot& segment : segments) blocks += segment.blocks.size();
  if (answer.size() + segments.size() > kMaxAnswerSegments || blocks > kMaxAnswerBlocks) {
    // Too much to be an honest answer: the session's leases read as
    // unanswered, and nothing more of it is kept.
    pending.blocks.erase(session);
    pending.waiting.erase(session);
    pending.missing[session] =
        absl::StrCat("answered too much: over ", kMaxAnswerSegments, " segments or ",
                     kMaxAnswerBlocks, " blocks, so its answer was dropped");
    return;
  }
  for (SegmentSnapshot& segment : segments) answer.push_back(std::move(segment));
  if (last) {
    pending.waiting.erase(session);
    ++pending.answered;
  }
}

void ClientQueries::OnSessionClosed(SessionId session) {
  absl::MutexLock lock(&mu_);
  unresponsive_.erase(session);
  answered_.erase(session);
  for (auto& [request, pending] : pending_) {
    if (pending.waiting.erase(session) > 0) pending.blocks.erase(session);
  }
}

void FillLeaseBlocks(const ClientQueries::LeaseBlocksAnswers& answers, absl::Duration timeout,
                     std::vector<SegmentSnapshot>& segments) {
  // The answers' segments by (session, device, address).
  absl::flat_hash_map<std::tuple<uint64_t, int32_t, uint64_t>, const SegmentSnapshot*> listed;
  for (const auto& [session, answer] : answers.blocks) {
    for (const SegmentSnapshot& s : answer)
      listed.emplace(std::make_tuple(session.value(), s.device.value(), s.address), &s);
  }
  for (SegmentSnapshot& segment : segments) {
    if (!segment.leased) continue;
    const SessionId session(segment.client.value());
    // Why the blocks are not known, or empty when they are.
    std::string unavailable;
    const SegmentSnapshot* answer = nullptr;
    if (auto why = answers.missing.find(session); why != answers.missing.end()) {
      unavailable =
          absl::StrCat("blocks unavailable: session ", session.value(), "'s client ", why->second);
    } else if (!answers.blocks.contains(session)) {
      unavailable = absl::StrCat("blocks unavailable: session ", session.value(),
                                 "'s client did not answer within ", absl::FormatDuration(timeout));
    } else if (auto it = listed.find(
                   std::make_tuple(session.value(), segment.device.value(), segment.address));
               it == listed.end()) {
      unavailable = absl::StrCat("blocks unavailable: session ", session.value(),
                                 "'s client did not list this lease");
    } else if (std::string wrong = CheckTiling(segment, *it->second); !wrong.empty()) {
      unavailable = absl::StrCat("blocks unavailable: session ", session.value(),
                                 "'s client described this lease wrongly: ", wrong);
    } else {
      answer = it->second;
    }
    if (answer == nullptr) {
      // One block of unknown state spans it: PyTorch's tools want a
      // segment's blocks to add up to its size.
      segment.blocks_unavailable = std::move(unavailable);
      segment.blocks.assign(1, BlockSnapshot{.address = segment.address,
                                             .size = segment.total_size,
                                             .state = BlockState::kUnknown,
                                             .client = segment.client});
      continue;
    }
    segment.blocks.clear();
    for (const BlockSnapshot& b : answer->blocks) {
      BlockSnapshot& block = segment.blocks.emplace_back(b);
      block.client = block.state == BlockState::kInactive ? ClientId(0) : segment.client;
      if (block.state == BlockState::kInactive) continue;
      if (block.state == BlockState::kActiveAllocated) segment.allocated_size += block.size;
      segment.active_size += block.size;
      segment.requested_size += block.requested_size;
    }
  }
}

}  // namespace gpumux
