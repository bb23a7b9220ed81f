// Host<->device transfer counting: copies that cross memory spaces count, the others do not.
#include <gtest/gtest.h>

#include <vector>

#include "minimllm/core/transfer.hpp"
#include "minimllm/core/types.hpp"

namespace minimllm {
namespace {

TEST(Transfer, CountsOnlyCopiesBetweenHostAndDevice) {
  const TransferCounts before = transfer_counts();
  const t_ivec ids = to_device({3, 1, 4, 1, 5}, "ids");  // host -> MemSpace
  const t_ivec copy("copy", ids.extent(0));
  transfer(copy, ids);                   // MemSpace -> MemSpace: never a transfer
  const auto back = copy_to_host(copy);  // MemSpace -> host
  const TransferCounts counted = transfer_counts() - before;

  const std::int64_t crossings = kMemSpaceIsHostAccessible ? 0 : 1;
  EXPECT_EQ(counted.to_device, crossings);
  EXPECT_EQ(counted.to_host, crossings);
  EXPECT_EQ(counted.bytes, crossings * 2 * 5 * static_cast<std::int64_t>(sizeof(int)));
  ASSERT_EQ(back.extent(0), 5u);
  EXPECT_EQ(back(0), 3);
  EXPECT_EQ(back(4), 5);
}

// The rule itself, which host builds never exercise through real copies: one side on the host counts.
TEST(Transfer, CountingRule) {
  const TransferCounts before = transfer_counts();
  detail::count_transfer(/*dst_on_host=*/false, /*src_on_host=*/true, 100);  // upload
  detail::count_transfer(true, false, 40);                                   // download
  detail::count_transfer(true, false, 2);
  detail::count_transfer(true, true, 1000);    // host to host
  detail::count_transfer(false, false, 1000);  // device to device
  const TransferCounts counted = transfer_counts() - before;
  EXPECT_EQ(counted.to_device, 1);
  EXPECT_EQ(counted.to_host, 2);
  EXPECT_EQ(counted.bytes, 142);
}

}  // namespace
}  // namespace minimllm
