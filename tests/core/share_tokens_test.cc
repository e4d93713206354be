// ShareTokens alone: a token is redeemed once and names its block until the
// block is forgotten, and issuing stops at each of its three budgets (per
// allocation, daemon-wide, a tenant's quarter) with messages that say which.

#include "server/core/share_tokens.h"

#include <string>

#include "absl/status/statusor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/status_matchers.h"

namespace gpumux {
namespace {

using ::gpumux::testing::IsOk;
using ::gpumux::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr BlockId kBlock(3);
constexpr BlockId kOtherBlock(4);
constexpr AllocationId kId(9);

// Issues a token that must be issued.
std::string IssueOk(ShareTokens& tokens, BlockId block, absl::string_view tenant = "") {
  absl::StatusOr<std::string> token = tokens.Issue(block, kId, tenant);
  EXPECT_THAT(token, IsOk());
  return token.ok() ? *token : std::string();
}

TEST(ShareTokensTest, ATokenIsUsedOnce) {
  ShareTokens tokens(64);
  const std::string token = IssueOk(tokens, kBlock);
  EXPECT_THAT(token, StartsWith("gpumux-share-"));
  absl::StatusOr<BlockId> redeemed = tokens.Redeem(token);
  ASSERT_THAT(redeemed, IsOk());
  EXPECT_EQ(*redeemed, kBlock);
  EXPECT_THAT(tokens.Redeem(token),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       "share token was already used: tokens are single-use; ask the owner "
                       "to Share again"));
  EXPECT_EQ(tokens.counts().issued, 1u);
  EXPECT_EQ(tokens.counts().redeemed, 1u);
}

TEST(ShareTokensTest, EachShareIssuesADifferentToken) {
  ShareTokens tokens(64);
  const std::string first = IssueOk(tokens, kBlock);
  const std::string second = IssueOk(tokens, kBlock);
  EXPECT_NE(first, second);
  ASSERT_THAT(tokens.Redeem(first), IsOk());
  EXPECT_THAT(tokens.Redeem(second), IsOk());  // the first's use does not spend it
}

TEST(ShareTokensTest, ATokenNeverIssuedIsNotFound) {
  ShareTokens tokens(64);
  IssueOk(tokens, kBlock);
  const std::string well_formed = "gpumux-share-" + std::string(32, 'a');
  EXPECT_THAT(ShareTokens::CheckFormat(well_formed), IsOk());
  EXPECT_THAT(tokens.Redeem(well_formed),
              StatusIs(absl::StatusCode::kNotFound,
                       "share token not found: it was never issued or its allocation was freed"));
}

TEST(ShareTokensTest, OnlyTokensShapedAsIssuedPassTheFormatCheck) {
  ShareTokens tokens(64);
  EXPECT_THAT(ShareTokens::CheckFormat(IssueOk(tokens, kBlock)), IsOk());
  EXPECT_THAT(ShareTokens::CheckFormat("not a token"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "malformed share token (11 bytes): expected the string Share returned"));
  for (const std::string& bad :
       {"gpumux-share-" + std::string(31, 'a'), "gpumux-share-" + std::string(33, 'a'),
        "gpumux-share-" + std::string(32, 'A'), "gpumux-sharf-" + std::string(32, 'a')}) {
    EXPECT_THAT(ShareTokens::CheckFormat(bad), StatusIs(absl::StatusCode::kInvalidArgument)) << bad;
  }
}

TEST(ShareTokensTest, ForgettingABlockDropsItsTokensUsedOrNot) {
  ShareTokens tokens(64);
  const std::string used = IssueOk(tokens, kBlock);
  const std::string unused = IssueOk(tokens, kBlock);
  const std::string other = IssueOk(tokens, kOtherBlock);
  ASSERT_THAT(tokens.Redeem(used), IsOk());
  EXPECT_EQ(tokens.live(), 3u);
  tokens.Forget(kBlock);
  EXPECT_EQ(tokens.live(), 1u);
  EXPECT_THAT(tokens.Redeem(used), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(tokens.Redeem(unused), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(tokens.Redeem(other), IsOk());
  tokens.Forget(BlockId(99));  // never shared
  EXPECT_EQ(tokens.live(), 1u);
}

TEST(ShareTokensTest, AnAllocationIsSharedAtMostKMaxPerAllocationTimes) {
  ShareTokens tokens(1 << 20);
  for (size_t i = 0; i < ShareTokens::kMaxPerAllocation; ++i) {
    ASSERT_THAT(tokens.Issue(kBlock, kId, ""), IsOk()) << i;
  }
  EXPECT_THAT(tokens.Issue(kBlock, kId, ""),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       "allocation 9 was already shared 4096 times, the most one allocation may "
                       "be (4096); share another shareable allocation"));
  EXPECT_THAT(tokens.Issue(kOtherBlock, kId, ""), IsOk());
  // Used tokens count too, until the block goes.
  tokens.Forget(kBlock);
  EXPECT_THAT(tokens.Issue(kBlock, kId, ""), IsOk());
}

TEST(ShareTokensTest, TheDaemonsLimitCountsTheTokensOfLiveBlocks) {
  // Four tenants of two tokens each fill a limit of 8.
  ShareTokens tokens(8);
  for (const char* tenant : {"a", "b", "c", "d"}) {
    IssueOk(tokens, kBlock, tenant);
    ASSERT_THAT(tokens.Redeem(IssueOk(tokens, kOtherBlock, tenant)), IsOk());
  }
  EXPECT_THAT(tokens.Issue(kBlock, kId, "e"),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       "the daemon already holds 8 share tokens of live allocations, its limit "
                       "(gpumuxd --max-share-tokens=8); free shared allocations or ask the "
                       "operator to raise it"));
  tokens.Forget(kOtherBlock);
  EXPECT_THAT(tokens.Issue(kBlock, kId, "e"), IsOk());
  EXPECT_EQ(tokens.counts().issued, 9u);
}

TEST(ShareTokensTest, ATenantHoldsAtMostAQuarterOfTheDaemonsLimit) {
  ShareTokens tokens(8);
  IssueOk(tokens, kBlock, "a");
  IssueOk(tokens, kOtherBlock, "a");
  EXPECT_THAT(tokens.Issue(kBlock, kId, "a"),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("tenant 'a' holds 2 share tokens, a tenant's share")));
  EXPECT_THAT(tokens.Issue(kBlock, kId, ""), IsOk());  // the sessions without a tenant
  EXPECT_EQ(tokens.live(), 3u);
  // Its share comes back with the block.
  tokens.Forget(kOtherBlock);
  EXPECT_THAT(tokens.Issue(kBlock, kId, "a"), IsOk());
}

}  // namespace
}  // namespace gpumux
