#pragma once

// PageBook: the pages an expandable segment's mapping (PagedMapping) has
// mapped in this process, by offset, under the keys the daemon gave them, and
// the unmap notices still owed for pages that were replaced before their
// notice arrived. An allocation's reply and the session stream's notices
// travel apart, so a reply may bring a page the daemon mapped anew at an
// offset before the notice that it unmapped the page that was there: that
// notice is about the old page and must not unmap the new one. Every page
// the daemon maps reaches the session in a reply (it lies under the block
// that needed it) and every page it unmaps in one notice, in the daemon's
// order, so counting replacements per offset pairs each late notice with the
// page it was about. Not thread-safe: its owner serializes the calls.

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace gpumux {

class PageBook {
 public:
  // The key of the page mapped at `offset`, or null.
  const std::string* KeyAt(uint64_t offset) const;
  // A page of `size` bytes is mapped at `offset` under `key` now; a page of
  // another key that was there was replaced, its notice still to come.
  void Mapped(uint64_t offset, std::string key, uint64_t size);
  // The daemon's notice that it unmapped [offset, offset + size): the pages
  // to unmap here (offset and size of each), taken out of the book; pages
  // that replaced the ones the notice is about stay.
  std::vector<std::pair<uint64_t, uint64_t>> Unmapped(uint64_t offset, uint64_t size);
  // Every page mapped (offset and size).
  std::vector<std::pair<uint64_t, uint64_t>> All() const;

 private:
  struct Page {
    std::string key;
    uint64_t size = 0;
    int owed_notices = 0;  // replaced pages whose notice has not come yet
  };
  std::map<uint64_t, Page> pages_;
};

}  // namespace gpumux
