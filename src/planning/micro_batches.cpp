#include "micro_batches.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "load_tree.hpp"
#include "minimllm/layout/rank_work.hpp"

namespace minimllm::planning {
namespace {

// Deals samples (largest first) into `parts` blocks of the executor's fixed counts (micro_batch_begin), each
// onto the block with the fewest tokens that still has room. Returns the blocks' largest token sum and the
// order.
double deal_blocks(const std::vector<int>& samples, const BatchCosts& costs, int parts,
                   std::vector<int>& order) {
  const int n = static_cast<int>(samples.size());
  std::vector<int> tokens(n);
  for (int i = 0; i < n; ++i) tokens[i] = static_cast<int>(costs.tokens[samples[i]]);
  std::vector<std::vector<int>> blocks(parts);
  std::vector<int> room(parts);
  LoadTree load(parts);
  for (int b = 0; b < parts; ++b)
    room[b] = micro_batch_begin(n, b + 1, parts) - micro_batch_begin(n, b, parts);
  for (int b = 0; b < parts; ++b)
    if (room[b] == 0) load.add(b, kInf);
  double worst = 0.0;
  for (int i : order_by_decreasing(tokens)) {
    const int b = load.argmin();
    blocks[b].push_back(samples[i]);
    load.add(b, tokens[i]);
    worst = std::max(worst, load.load(b));
    if (--room[b] == 0) load.add(b, kInf);  // full
  }
  order.clear();
  for (const auto& block : blocks) order.insert(order.end(), block.begin(), block.end());
  return worst;
}

}  // namespace

void fit_micro_batches(LlmGroup& group, const BatchCosts& costs, const CostModel& cost) {
  const int n = static_cast<int>(group.samples.size());
  group.micro_batches = 1;
  group.micro_batch_ends.clear();  // near-equal blocks (micro_batch_begin)
  const double capacity = cost.token_capacity(static_cast<int>(group.ranks.size()));
  double total = 0.0;
  for (int s : group.samples) total += costs.tokens[s];
  if (n <= 1 || total <= capacity) return;
  std::vector<int> order;
  for (int parts = std::max(2, static_cast<int>(std::ceil(total / capacity))); parts < n; ++parts) {
    if (deal_blocks(group.samples, costs, parts, order) <= capacity) {
      group.samples = order;
      group.micro_batches = parts;
      return;
    }
  }
  group.micro_batches = n;  // one sample per micro-batch: the most memory can allow
}

}  // namespace minimllm::planning
