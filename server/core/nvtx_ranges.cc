#include "server/core/nvtx_ranges.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/base/printable_text.h"
#include "server/core/session_registry.h"

namespace gpumux {
namespace {

absl::Status CheckMessage(absl::string_view message) {
  if (message.size() > NvtxRanges::kMaxMessageBytes) {
    return absl::InvalidArgumentError(absl::StrCat("NVTX message is ", message.size(),
                                                   " bytes; at most ", NvtxRanges::kMaxMessageBytes,
                                                   " are allowed"));
  }
  // Shown in profiles and `gpumux bottleneck`'s report, and cut short at a
  // NUL by C consumers.
  return CheckPrintable("NVTX message", message,
                        "it is printed in profiles and reports, so it must be printable");
}

}  // namespace

void NvtxRanges::AddSession(SessionId session) {
  absl::MutexLock lock(&mu_);
  books_.try_emplace(session);
}

absl::StatusOr<NvtxRanges::Books*> NvtxRanges::BooksLocked(SessionId session) {
  auto it = books_.find(session);
  if (it == books_.end()) {
    return SessionClosedError(session);
  }
  return &it->second;
}

void NvtxRanges::AddLocked(Books& books, NvtxRecord record) {
  if (books.records.size() == kMaxRecords) books.records.pop_front();
  books.records.push_back(std::move(record));
}

absl::Status NvtxRanges::Mark(SessionId session, NvtxThread thread, absl::string_view message) {
  if (absl::Status s = CheckMessage(message); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  absl::StatusOr<Books*> found = BooksLocked(session);
  if (!found.ok()) return found.status();
  Books& books = **found;
  auto stack = books.stacks.find(thread);
  const int depth =
      stack == books.stacks.end() ? 0 : static_cast<int>(stack->second.messages.size());
  AddLocked(books, {NvtxRecord::Kind::kMark, std::string(message), depth, absl::Now(), thread});
  if (sink_ != nullptr) sink_->Mark(session, message);
  return absl::OkStatus();
}

absl::StatusOr<int> NvtxRanges::Push(SessionId session, NvtxThread thread,
                                     absl::string_view message) {
  if (absl::Status s = CheckMessage(message); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  absl::StatusOr<Books*> found = BooksLocked(session);
  if (!found.ok()) return found.status();
  Books& books = **found;
  if (books.open == kMaxOpenRanges) {
    return absl::ResourceExhaustedError(absl::StrCat("a session keeps at most ", kMaxOpenRanges,
                                                     " NVTX ranges open on all its threads; pop "
                                                     "some before pushing more"));
  }
  Stack& stack = books.stacks[thread];
  if (stack.messages.size() == kMaxDepth) {
    return absl::ResourceExhaustedError(absl::StrCat("NVTX ranges nest at most ", kMaxDepth,
                                                     " deep; pop some before pushing more"));
  }
  const int depth = static_cast<int>(stack.messages.size());
  stack.messages.emplace_back(message);
  ++books.open;
  if (sink_ != nullptr) stack.sink_ranges.push_back(sink_->RangeStart(session, message));
  AddLocked(books, {NvtxRecord::Kind::kPush, std::string(message), depth, absl::Now(), thread});
  return depth;
}

absl::StatusOr<int> NvtxRanges::Pop(SessionId session, NvtxThread thread) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<Books*> found = BooksLocked(session);
  if (!found.ok()) return found.status();
  Books& books = **found;
  auto it = books.stacks.find(thread);
  if (it == books.stacks.end()) {
    return absl::FailedPreconditionError(
        "range_pop without a matching range_push: no NVTX range is open on this thread");
  }
  Stack& stack = it->second;
  const int depth = static_cast<int>(stack.messages.size()) - 1;
  std::string message = std::move(stack.messages.back());
  stack.messages.pop_back();
  --books.open;
  if (sink_ != nullptr) {
    sink_->RangeEnd(stack.sink_ranges.back());
    stack.sink_ranges.pop_back();
  }
  if (stack.messages.empty()) books.stacks.erase(it);
  AddLocked(books, {NvtxRecord::Kind::kPop, std::move(message), depth, absl::Now(), thread});
  return depth;
}

std::vector<std::string> NvtxRanges::OpenRanges(SessionId session, NvtxThread thread) const {
  absl::MutexLock lock(&mu_);
  auto it = books_.find(session);
  if (it == books_.end()) return {};
  auto stack = it->second.stacks.find(thread);
  return stack == it->second.stacks.end() ? std::vector<std::string>{} : stack->second.messages;
}

std::vector<NvtxRecord> NvtxRanges::Records(SessionId session) const {
  absl::MutexLock lock(&mu_);
  auto it = books_.find(session);
  if (it == books_.end()) return {};
  return std::vector<NvtxRecord>(it->second.records.begin(), it->second.records.end());
}

void NvtxRanges::RemoveSession(SessionId session) {
  absl::MutexLock lock(&mu_);
  auto it = books_.find(session);
  if (it == books_.end()) return;
  if (sink_ != nullptr) {
    for (const auto& [thread, stack] : it->second.stacks) {
      for (auto range = stack.sink_ranges.rbegin(); range != stack.sink_ranges.rend(); ++range) {
        sink_->RangeEnd(*range);
      }
    }
  }
  books_.erase(it);
}

}  // namespace gpumux
