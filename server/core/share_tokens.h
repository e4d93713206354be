#pragma once

// ShareTokens: the single-use tokens another session imports a shared
// allocation with. Each names a booked block (AllocationBooks' BlockId);
// once redeemed it is kept, to refuse a replay, until the block is freed and
// all of its tokens go. Issuing is bounded per allocation, daemon-wide
// (gpumuxd --max-share-tokens) and by each tenant's share of that.
// Not thread-safe: MemoryManager's mutex guards it.

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "gpumux/common/ids.h"
#include "server/core/allocation_books.h"
#include "server/core/limit_refusal.h"
#include "server/core/tenant_shares.h"

namespace gpumux {

// Share tokens issued and redeemed (imported) since the daemon started.
struct ShareCounts {
  uint64_t issued = 0;
  uint64_t redeemed = 0;
};

class ShareTokens {
 public:
  // Tokens one allocation may have been issued while it lives (used or not:
  // a used one is kept to say FAILED_PRECONDITION on replay).
  static constexpr size_t kMaxPerAllocation = 4096;

  // `max_tokens` bounds the tokens of all live blocks, used or not; a tenant
  // (NamedTenant) may hold a quarter of it (TenantShares).
  explicit ShareTokens(size_t max_tokens) : max_tokens_(max_tokens) {}

  // A new token for `block`, which the sharing session names `id` (for
  // messages), taking one of `tenant`'s share. RESOURCE_EXHAUSTED, logged as
  // LimitRefusal logs, past kMaxPerAllocation tokens of the block,
  // max_tokens, or the tenant's share; nothing is issued then.
  absl::StatusOr<std::string> Issue(BlockId block, AllocationId id, absl::string_view tenant);

  // INVALID_ARGUMENT unless `token` is shaped as Issue makes them. Needs no
  // state: callers check a token before taking their lock.
  static absl::Status CheckFormat(absl::string_view token);
  // The block `token` names, once: FAILED_PRECONDITION for a token already
  // redeemed; NOT_FOUND for one never issued (malformed ones included) or
  // whose block was forgotten.
  absl::StatusOr<BlockId> Redeem(absl::string_view token);

  // The block was freed: its tokens, used or not, go, and each gives its
  // tenant's share back. A block never shared is no-op.
  void Forget(BlockId block);

  ShareCounts counts() const { return {.issued = issued_, .redeemed = redeemed_}; }
  // Tokens of live blocks, used or not (what max_tokens bounds).
  size_t live() const { return tokens_.size(); }

 private:
  struct Issued {
    BlockId block;
    bool used = false;
  };

  const size_t max_tokens_;
  LimitRefusal allocation_refusal_{"share tokens per allocation (4096)"};
  LimitRefusal daemon_refusal_{"--max-share-tokens"};
  TenantShares tenant_shares_{"share tokens", "--max-share-tokens"};
  absl::flat_hash_map<std::string, Issued> tokens_;
  // Per block, every token issued for it with the tenant whose share it took.
  absl::flat_hash_map<BlockId, std::vector<std::pair<std::string, std::string>>> by_block_;
  uint64_t issued_ = 0;
  uint64_t redeemed_ = 0;
};

}  // namespace gpumux
