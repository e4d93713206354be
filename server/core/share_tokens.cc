#include "server/core/share_tokens.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/base/random_hex.h"
#include "common/base/status_macros.h"

namespace gpumux {
namespace {

constexpr absl::string_view kTokenPrefix = "gpumux-share-";
constexpr int kTokenRandomBytes = 16;

}  // namespace

absl::StatusOr<std::string> ShareTokens::Issue(BlockId block, AllocationId id,
                                               absl::string_view tenant) {
  auto of_block = by_block_.find(block);
  const size_t shared = of_block == by_block_.end() ? 0 : of_block->second.size();
  if (shared >= kMaxPerAllocation) {
    return allocation_refusal_.Refuse(
        absl::StrCat("allocation ", id.value(), " was already shared ", shared,
                     " times, the most one allocation may be (", kMaxPerAllocation,
                     "); share another shareable allocation"));
  }
  if (tokens_.size() >= max_tokens_) {
    return daemon_refusal_.Refuse(absl::StrCat(
        "the daemon already holds ", tokens_.size(),
        " share tokens of live allocations, its limit (gpumuxd --max-share-tokens=", max_tokens_,
        "); free shared allocations or ask the operator to raise it"));
  }
  GPUMUX_RETURN_IF_ERROR(tenant_shares_.Take(tenant, max_tokens_));
  std::string token = absl::StrCat(kTokenPrefix, RandomHex(kTokenRandomBytes));
  by_block_[block].emplace_back(token, std::string(tenant));
  tokens_.emplace(token, Issued{.block = block});
  ++issued_;
  return token;
}

absl::Status ShareTokens::CheckFormat(absl::string_view token) {
  if (!absl::StartsWith(token, kTokenPrefix) ||
      !IsLowerHex(std::string(token.substr(kTokenPrefix.size())), 2 * kTokenRandomBytes)) {
    return absl::InvalidArgumentError(absl::StrCat("malformed share token (", token.size(),
                                                   " bytes): expected the string Share returned"));
  }
  return absl::OkStatus();
}

absl::StatusOr<BlockId> ShareTokens::Redeem(absl::string_view token) {
  auto it = tokens_.find(token);
  if (it == tokens_.end()) {
    return absl::NotFoundError(
        "share token not found: it was never issued or its allocation was freed");
  }
  if (it->second.used) {
    return absl::FailedPreconditionError(
        "share token was already used: tokens are single-use; ask the owner to Share again");
  }
  it->second.used = true;
  ++redeemed_;
  return it->second.block;
}

void ShareTokens::Forget(BlockId block) {
  auto it = by_block_.find(block);
  if (it == by_block_.end()) return;
  for (const auto& [token, tenant] : it->second) {
    tokens_.erase(token);
    tenant_shares_.Give(tenant);
  }
  by_block_.erase(it);
}

}  // namespace gpumux
