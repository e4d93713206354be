#include "server/core/nvtx_ranges.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/printable_text.h"
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

absl::Status NvtxRanges::Mark(SessionId session, absl::string_view message) {
  if (absl::Status s = CheckMessage(message); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  absl::StatusOr<Books*> found = BooksLocked(session);
  if (!found.ok()) return found.status();
  Books& books = **found;
  AddLocked(books, {NvtxRecord::Kind::kMark, std::string(message),
                    static_cast<int>(books.stack.size()), absl::Now()});
  if (sink_ != nullptr) sink_->Mark(session, message);
  return absl::OkStatus();
}

absl::StatusOr<int> NvtxRanges::Push(SessionId session, absl::string_view message) {
  if (absl::Status s = CheckMessage(message); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  absl::StatusOr<Books*> found = BooksLocked(session);
  if (!found.ok()) return found.status();
  Books& books = **found;
  if (books.stack.size() == kMaxDepth) {
    return absl::ResourceExhaustedError(absl::StrCat("NVTX ranges nest at most ", kMaxDepth,
                                                     " deep; pop some before pushing more"));
  }
  int depth = static_cast<int>(books.stack.size());
  books.stack.emplace_back(message);
  if (sink_ != nullptr) books.sink_ranges.push_back(sink_->RangeStart(session, message));
  AddLocked(books, {NvtxRecord::Kind::kPush, std::string(message), depth, absl::Now()});
  return depth;
}

absl::StatusOr<int> NvtxRanges::Pop(SessionId session) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<Books*> found = BooksLocked(session);
  if (!found.ok()) return found.status();
  Books& books = **found;
  if (books.stack.empty()) {
    return absl::FailedPreconditionError(
        "range_pop without a matching range_push: no NVTX range is open");
  }
  int depth = static_cast<int>(books.stack.size()) - 1;
  std::string message = std::move(books.stack.back());
  books.stack.pop_back();
  if (sink_ != nullptr) {
    sink_->RangeEnd(books.sink_ranges.back());
    books.sink_ranges.pop_back();
  }
  AddLocked(books, {NvtxRecord::Kind::kPop, std::move(message), depth, absl::Now()});
  return depth;
}

std::vector<std::string> NvtxRanges::OpenRanges(SessionId session) const {
  absl::MutexLock lock(&mu_);
  auto it = books_.find(session);
  return it == books_.end() ? std::vector<std::string>{} : it->second.stack;
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
    for (auto range = it->second.sink_ranges.rbegin(); range != it->second.sink_ranges.rend();
         ++range) {
      sink_->RangeEnd(*range);
    }
  }
  books_.erase(it);
}

}  // namespace gpumux
