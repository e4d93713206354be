#include "client/parallel_copy.h"

#include <algorithm>
#include <cstdint>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace gpumux {
namespace {

std::vector<uint8_t> Pattern(size_t size, uint8_t salt) {
  std::vector<uint8_t> bytes(size);
  for (size_t i = 0; i < size; ++i) bytes[i] = static_cast<uint8_t>(i * 131 + salt + i / 4096);
  return bytes;
}

TEST(ParallelMemcpyTest, CopiesEverySizeExactly) {
  for (size_t size : {size_t{0}, size_t{1}, size_t{4095}, size_t{4} << 20, (size_t{4} << 20) + 1,
                      (size_t{9} << 20) + 4093, size_t{64} << 20}) {
    const std::vector<uint8_t> src = Pattern(size, 7);
    // Guard bytes around the destination catch a slice written out of place.
    std::vector<uint8_t> dst(size + 2, 0xee);
    ParallelMemcpy(dst.data() + 1, src.data(), size);
    EXPECT_EQ(dst.front(), 0xee) << size;
    EXPECT_EQ(dst.back(), 0xee) << size;
    EXPECT_TRUE(std::equal(src.begin(), src.end(), dst.begin() + 1)) << size;
  }
}

TEST(ParallelMemcpyTest, ConcurrentCallersShareThePool) {
  const std::vector<uint8_t> src = Pattern(size_t{16} << 20, 3);
  std::vector<std::vector<uint8_t>> dsts(4, std::vector<uint8_t>(src.size()));
  std::vector<std::thread> threads;
  for (auto& dst : dsts)
    threads.emplace_back([&] { ParallelMemcpy(dst.data(), src.data(), src.size()); });
  for (std::thread& t : threads) t.join();
  for (const auto& dst : dsts) EXPECT_TRUE(dst == src);
}

}  // namespace
}  // namespace gpumux
