#pragma once

// The books of expandable segments as the backends and replay's
// addresses-only device keep them: reserved
// ranges by start address, each with `size`, `page_size` and `pages` (page i
// at offset i * page_size), and the lookups their calls share.

#include <cstdint>
#include <map>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "common/segments/segment_source.h"

namespace gpumux {

// Whole pages [first, first + count) of the range at `base`.
template <typename Range>
struct PageSpan {
  uint64_t base = 0;
  Range* range = nullptr;
  uint64_t first = 0;
  uint64_t count = 0;
};

// The range of `ranges` (a std::map by start address, const or not) holding
// `address`, or ranges.end().
template <typename Ranges>
auto RangeAt(Ranges& ranges, uint64_t address) -> decltype(ranges.end()) {
  auto it = ranges.upper_bound(address);
  if (it == ranges.begin()) return ranges.end();
  --it;
  return address - it->first < it->second.size ? it : ranges.end();
}

// The whole pages [address, address + size) of one range, every one of them
// mapped (or every one unmapped when `mapped` is false) as `is_mapped(page)`
// tells: INVALID_ARGUMENT when they are not whole pages of one range,
// FAILED_PRECONDITION naming the first page in the other state. `device`
// names the device in messages ("host device 0").
template <typename Range, typename IsMapped>
absl::StatusOr<PageSpan<Range>> FindPages(std::map<uint64_t, Range>& ranges,
                                          absl::string_view device, uint64_t address, uint64_t size,
                                          bool mapped, IsMapped is_mapped) {
  if (auto it = RangeAt(ranges, address); it != ranges.end()) {
    Range& range = it->second;
    const uint64_t offset = address - it->first;
    if (size <= range.size - offset && size > 0 && offset % range.page_size == 0 &&
        size % range.page_size == 0) {
      const PageSpan<Range> span{it->first, &range, offset / range.page_size,
                                 size / range.page_size};
      for (uint64_t i = span.first; i < span.first + span.count; ++i) {
        if (is_mapped(range.pages[i]) != mapped) {
          return absl::FailedPreconditionError(
              absl::StrFormat("%s: the page at 0x%x is %s", device, it->first + i * range.page_size,
                              mapped ? "not mapped" : "mapped already"));
        }
      }
      return span;
    }
  }
  return absl::InvalidArgumentError(absl::StrFormat(
      "%s: %d bytes at 0x%x are not whole pages of one expandable segment", device, size, address));
}

// How another process maps the pages under [offset, offset + size) of the
// range at `base` (inside it, size > 0): each page's offset, size and key.
// INVALID_ARGUMENT naming the first page that `is_mapped` says is not.
template <typename Range, typename IsMapped>
absl::StatusOr<std::vector<PageHandle>> HandlesOfPages(const Range& range, uint64_t base,
                                                       uint64_t offset, uint64_t size,
                                                       absl::string_view device,
                                                       IsMapped is_mapped) {
  std::vector<PageHandle> pages;
  for (uint64_t i = offset / range.page_size; i <= (offset + size - 1) / range.page_size; ++i) {
    if (!is_mapped(range.pages[i])) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: the page at 0x%x of an expandable segment is not mapped", device,
                          base + i * range.page_size));
    }
    pages.push_back(PageHandle{i * range.page_size, range.page_size, range.pages[i].key});
  }
  return pages;
}

}  // namespace gpumux
