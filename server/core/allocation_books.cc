#include "server/core/allocation_books.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"

namespace gpumux {
namespace {

absl::Status NotFound(AllocationId id) {
  return absl::NotFoundError(absl::StrCat(
      "allocation ", id.value(), " not found: it is not a live allocation of this session"));
}

}  // namespace

void AllocationBooks::AddSession(SessionId session) {
  SessionBooks& books = sessions_[session];
  books.leases.assign(static_cast<size_t>(device_count_), 0);
  books.imported_bytes.assign(static_cast<size_t>(device_count_), 0);
}

void AllocationBooks::RemoveSession(SessionId session) { sessions_.erase(session); }

std::vector<AllocationId> AllocationBooks::SessionIds(SessionId session) const {
  auto books = sessions_.find(session);
  if (books == sessions_.end()) return {};
  std::vector<AllocationId> ids(books->second.ids.begin(), books->second.ids.end());
  std::sort(ids.begin(), ids.end());
  return ids;
}

std::vector<uint64_t> AllocationBooks::ImportedBytes(SessionId session) const {
  auto books = sessions_.find(session);
  return books == sessions_.end() ? std::vector<uint64_t>() : books->second.imported_bytes;
}

std::vector<SessionId> AllocationBooks::SessionsWithLeases(DeviceIndex device) const {
  std::vector<SessionId> out;
  for (const auto& [session, books] : sessions_) {
    if (books.leases[static_cast<size_t>(device.value())] > 0) out.push_back(session);
  }
  return out;
}

AllocationView AllocationBooks::AddBlock(SessionId session, AllocationView view, bool shareable,
                                         bool leased) {
  const BlockId id(next_block_id_++);
  Block& block = blocks_[id];
  block.id = id;
  block.view = std::move(view);
  block.allocated_by = session;
  block.shareable = shareable;
  block.leased = leased;
  block.charged = session;
  if (leased) ++sessions_.at(session).leases[static_cast<size_t>(block.view.device.value())];
  return AddReference(session, &block, /*imported=*/false);
}

AllocationView AllocationBooks::AddImport(SessionId session, BlockId block) {
  return AddReference(session, &blocks_.at(block), /*imported=*/true);
}

AllocationView AllocationBooks::AddReference(SessionId session, Block* block, bool imported) {
  AllocationId id(next_allocation_id_++);
  block->refs.push_back(id);
  refs_.emplace(id, Reference{session, block, imported});
  SessionBooks& books = sessions_.at(session);
  books.ids.insert(id);
  if (imported)
    books.imported_bytes[static_cast<size_t>(block->view.device.value())] += block->view.size;
  AllocationView view = block->view;
  view.id = id;
  return view;
}

AllocationBooks::Dropped AllocationBooks::DropReference(AllocationId id) {
  auto it = refs_.find(id);
  const Reference ref = it->second;
  refs_.erase(it);
  Block* block = ref.block;
  const size_t device_slot = static_cast<size_t>(block->view.device.value());
  SessionBooks& books = sessions_.at(ref.session);
  books.ids.erase(id);
  if (ref.imported) books.imported_bytes[device_slot] -= block->view.size;
  block->refs.erase(std::find(block->refs.begin(), block->refs.end(), id));

  Dropped dropped{.block = block->id,
                  .device = block->view.device,
                  .address = block->view.address,
                  .size = block->view.size,
                  .segment_size = block->view.segment_size,
                  .imported = ref.imported};
  if (block->refs.empty()) {
    if (block->leased) --books.leases[device_slot];
    blocks_.erase(dropped.block);
    dropped.last = true;
    return dropped;
  }
  if (block->charged == ref.session) {
    // The charged holder left; the oldest remaining reference takes over the
    // block and stops counting it as imported.
    Reference& heir = refs_.at(block->refs.front());
    if (heir.imported) {
      heir.imported = false;
      sessions_.at(heir.session).imported_bytes[device_slot] -= block->view.size;
    }
    block->charged = heir.session;
    dropped.heir = heir.session;
  }
  return dropped;
}

absl::StatusOr<const AllocationBooks::Block*> AllocationBooks::Find(SessionId session,
                                                                    AllocationId id) const {
  auto it = refs_.find(id);
  if (it == refs_.end() || it->second.session != session) return NotFound(id);
  return it->second.block;
}

absl::StatusOr<AllocationView> AllocationBooks::Lookup(SessionId session, AllocationId id) const {
  GPUMUX_ASSIGN_OR_RETURN(const Block* block, Find(session, id));
  AllocationView view = block->view;
  view.id = id;
  return view;
}

absl::StatusOr<AllocationBooks::Block*> AllocationBooks::FindRange(SessionId session,
                                                                   const RangeUse& range) {
  auto it = refs_.find(range.id);
  if (it == refs_.end() || it->second.session != session) return NotFound(range.id);
  Block* block = it->second.block;
  const AllocationView& view = block->view;
  if (range.offset > view.requested_size || range.size > view.requested_size - range.offset) {
    return absl::OutOfRangeError(absl::StrCat(
        "bytes [", range.offset, ", ", range.offset, " + ", range.size, ") are outside allocation ",
        range.id.value(), " of ", view.requested_size, " bytes"));
  }
  return block;
}

bool AllocationBooks::NoneHeld(absl::Span<const AllocationId> ids) const {
  for (AllocationId id : ids) {
    auto it = refs_.find(id);
    if (it != refs_.end() && it->second.block->holds > 0) return false;
  }
  return true;
}

}  // namespace gpumux
