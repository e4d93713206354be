#include "client/page_book.h"

namespace gpumux {

const std::string* PageBook::KeyAt(uint64_t offset) const {
  auto it = pages_.find(offset);
  return it == pages_.end() ? nullptr : &it->second.key;
}

void PageBook::Mapped(uint64_t offset, std::string key, uint64_t size) {
  Page& page = pages_[offset];
  if (!page.key.empty() && page.key != key) ++page.owed_notices;
  page.key = std::move(key);
  page.size = size;
}

std::vector<std::pair<uint64_t, uint64_t>> PageBook::Unmapped(uint64_t offset, uint64_t size) {
  std::vector<std::pair<uint64_t, uint64_t>> unmap;
  for (auto it = pages_.lower_bound(offset); it != pages_.end() && it->first - offset < size;) {
    Page& page = it->second;
    if (page.owed_notices > 0) {
      --page.owed_notices;  // the notice was about the page this one replaced
      ++it;
      continue;
    }
    unmap.emplace_back(it->first, page.size);
    it = pages_.erase(it);
  }
  return unmap;
}

std::vector<std::pair<uint64_t, uint64_t>> PageBook::All() const {
  std::vector<std::pair<uint64_t, uint64_t>> all;
  for (const auto& [offset, page] : pages_) all.emplace_back(offset, page.size);
  return all;
}

}  // namespace gpumux
