#include "minimllm/planning/memory_fit.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <utility>

#include "minimllm/layout/rank_work.hpp"

namespace minimllm {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// The peak of every rank split in its two parts: the LLM's largest micro-batch (with state and fixed)
// and the encoder's patches.
struct RankBytes {
  std::vector<double> llm, encoder;
  bool apart = false;  // MemoryModel::encoder_apart
  double base = 0.0;   // state + fixed: what the encoder's own stage holds besides its patches
  double peak(int r) const { return apart ? std::max(llm[r], base + encoder[r]) : llm[r] + encoder[r]; }
};

// Each sample's length, and per encoder module the step's rows and its largest item's, in one walk over
// the items (once per plan: SampleMeta::tokens walks a sample's items each time it is asked).
struct BatchSizes {
  std::vector<int> tokens;
  std::vector<double> rows, largest_item;  // per module
};

BatchSizes batch_sizes(const GlobalBatch& batch) {
  BatchSizes sizes;
  sizes.tokens.resize(batch.samples.size());
  for (size_t s = 0; s < batch.samples.size(); ++s) {
    int tokens = batch.samples[s].text_len;
    for (const EncoderItem& item : batch.samples[s].items) {
      tokens += item.rows;
      if (item.module >= static_cast<int>(sizes.rows.size()))
        sizes.rows.resize(item.module + 1, 0.0), sizes.largest_item.resize(item.module + 1, 0.0);
      sizes.rows[item.module] += item.rows;
      sizes.largest_item[item.module] = std::max<double>(sizes.largest_item[item.module], item.rows);
    }
    sizes.tokens[s] = tokens;
  }
  return sizes;
}

// The encoder per micro-batch: each rank's largest stage's items (its encoder activations live one stage at
// a time), added to `encoder`.
void add_largest_stage_bytes(const StepPlan& plan, const GlobalBatch& batch, const MemoryModel& mem,
                             std::vector<double>& encoder) {
  const std::vector<int> stage = item_stages(plan, first_item_of_samples(batch));
  const long long stages = stage_count(plan);
  std::vector<std::pair<long long, double>> held;  // (owner x stages + stage, bytes) per item
  held.reserve(stage.size());
  int item = 0;
  for (const SampleMeta& sample : batch.samples)
    for (const EncoderItem& im : sample.items) {
      held.emplace_back(plan.item_owner[item] * stages + stage[item], mem.item_bytes(im));
      ++item;
    }
  std::sort(held.begin(), held.end());
  for (size_t i = 0; i < held.size();) {
    double sum = 0.0;
    size_t j = i;
    for (; j < held.size() && held[j].first == held[i].first; ++j) sum += held[j].second;
    double& rank = encoder[static_cast<size_t>(held[i].first / stages)];
    rank = std::max(rank, sum);
    i = j;
  }
}

RankBytes rank_bytes(const StepPlan& plan, const GlobalBatch& batch, const std::vector<int>& sample_tokens,
                     const CostModel& cost, int world_size) {
  const MemoryModel& mem = cost.memory;
  RankBytes bytes{std::vector<double>(world_size, mem.state + mem.fixed),
                  std::vector<double>(world_size, 0.0), mem.encoder_apart, mem.state + mem.fixed};
  for (const LlmGroup& group : plan.llm_groups) {
    const int g = static_cast<int>(group.ranks.size());
    double largest = 0.0;
    for (int m = 0; m < group.micro_batches; ++m) {
      double tokens = 0.0;
      for (int i = micro_batch_begin(group, m); i < micro_batch_begin(group, m + 1); ++i)
        tokens += sample_tokens[group.samples[i]];
      largest = std::max(largest, cost.micro_batch_bytes(tokens, g));
    }
    for (int r : group.ranks) bytes.llm[r] += largest;
  }
  if (mem.encoder_per_stage && plan.placement == Placement::colocated) {
    add_largest_stage_bytes(plan, batch, mem, bytes.encoder);
    return bytes;
  }
  int image = 0;
  for (const SampleMeta& sample : batch.samples)
    for (const EncoderItem& im : sample.items) bytes.encoder[plan.item_owner[image++]] += mem.item_bytes(im);
  return bytes;
}

void require_tokens_fit(const GlobalBatch& batch, const std::vector<int>& sample_tokens,
                        const CostModel& cost, int world_size) {
  if (!cost.bounded()) return;
  if (cost.memory.state + cost.memory.fixed >= cost.capacity_bytes)
    throw InputError(
        fmt::format("memory: the model's parameters, gradients and AdamW moments alone need {} per rank, but "
                    "the capacity is {}; they are sized by model.llm.* and model.encoder.*",
                    bytes_text(cost.memory.state + cost.memory.fixed), memory_summary(cost)));
  const double most = cost.token_capacity(world_size);
  for (size_t s = 0; s < sample_tokens.size(); ++s) {
    const int tokens = sample_tokens[s];
    if (tokens > most)
      throw InputError(fmt::format(
          "memory: sample {} of step {} has {} tokens, but even a context-parallel group of all {} ranks "
          "holds at most {:.0f} tokens of one micro-batch (every member keeps the whole sequence's K|V of "
          "every layer) at {}; shorten data.text.max or the images (data.images.max_per_sample, max_side), "
          "or give more memory per rank (machine.memory_gib)",
          s, batch.step, tokens, world_size, std::floor(most), memory_summary(cost)));
  }
}

// Moves encoder items off ranks whose memory they overflow, largest first, each to the encoder rank with
// the most room, on bytes already counted, which it keeps up to date. Returns the items moved.
int move_items_to_fit(StepPlan& plan, const GlobalBatch& batch, const CostModel& cost, RankBytes& bytes) {
  const int world_size = static_cast<int>(bytes.llm.size());
  std::vector<double> room(world_size);
  bool over = false;
  for (int r = 0; r < world_size; ++r) {
    // With the encoder's own stage only the encoder's part of a rank can make room for items.
    room[r] = cost.capacity_bytes - (bytes.apart ? bytes.base + bytes.encoder[r] : bytes.peak(r));
    over |= room[r] < 0.0;
  }
  if (!over) return 0;
  // Items of every overflowing rank, largest first; receivers: the encoder rank with the most room.
  std::vector<std::pair<double, int>> items;  // (-bytes, item)
  std::vector<double> item_bytes;
  for (const SampleMeta& sample : batch.samples)
    for (const EncoderItem& item : sample.items) item_bytes.push_back(cost.memory.item_bytes(item));
  for (size_t i = 0; i < item_bytes.size(); ++i)
    if (room[plan.item_owner[i]] < 0.0) items.emplace_back(-item_bytes[i], static_cast<int>(i));
  std::sort(items.begin(), items.end());
  std::set<std::pair<double, int>> roomiest;  // (-room, rank)
  for (int r : plan.encoder_ranks) roomiest.insert({-room[r], r});
  int moved = 0;
  for (const auto& [negative, i] : items) {
    const int from = plan.item_owner[i];
    if (room[from] >= 0.0) continue;
    const double need = -negative;
    const auto [negative_room, to] = *roomiest.begin();
    if (to == from || -negative_room < need) continue;
    roomiest.erase({-room[from], from});
    roomiest.erase({-room[to], to});
    room[from] += need, room[to] -= need;
    bytes.encoder[from] -= need, bytes.encoder[to] += need;
    roomiest.insert({-room[from], from});
    roomiest.insert({-room[to], to});
    plan.item_owner[i] = to;
    ++moved;
  }
  return moved;
}

// What a policy is told when it plans: the capacity less the encoder's share (memory_bound); none when the
// encoder has its own stage.
double encoder_reserve(const BatchSizes& sizes, const CostModel& cost, int world_size) {
  if (cost.memory.encoder_apart) return 0.0;
  double reserve = 0.0;  // each module's even share of its rows and one largest item more
  for (size_t m = 0; m < sizes.rows.size(); ++m)
    reserve += cost.memory.encoder_row_bytes(static_cast<int>(m)) *
               (std::ceil(sizes.rows[m] / world_size) + sizes.largest_item[m]);
  return reserve;
}

class MemoryBoundPlanner : public Planner {
 public:
  MemoryBoundPlanner(const std::string& policy, const CostModel& cost, PlannerFactory make)
      : policy_(policy),
        cost_(cost),
        make_(std::move(make)),
        unbounded_(cost.bounded() ? nullptr : make_(cost)),
        deterministic_(unbounded_ ? unbounded_->deterministic() : make_(cost)->deterministic()) {}
  const char* name() const override { return policy_.c_str(); }
  // The policy's own (flexsp's MILP under a time limit is not: StepPlanner plans it on rank 0).
  bool deterministic() const override { return deterministic_; }

  StepPlan plan(const GlobalBatch& batch, int world_size) const override {
    if (unbounded_) return unbounded_->plan(batch, world_size);
    const BatchSizes sizes = batch_sizes(batch);
    const std::vector<int>& tokens = sizes.tokens;
    require_tokens_fit(batch, tokens, cost_, world_size);
    CostModel planning = cost_;
    planning.encoder_reserve_bytes = encoder_reserve(sizes, cost_, world_size);
    const int longest = tokens.empty() ? 0 : *std::max_element(tokens.begin(), tokens.end());
    // A reserve that would leave the longest sample nowhere to go is left to the items' moves.
    if (planning.token_capacity(world_size) < longest) planning.encoder_reserve_bytes = 0.0;
    StepPlan plan = make_(planning)->plan(batch, world_size);
    RankBytes bytes = rank_bytes(plan, batch, tokens, cost_, world_size);
    // Moves count an item's bytes in full on both ranks; with the encoder per micro-batch a rank holds only
    // its largest stage's, so the peaks are counted again after any move.
    if (cost_.memory.encoder_rows_cost_memory() && move_items_to_fit(plan, batch, cost_, bytes) > 0 &&
        cost_.memory.encoder_per_stage)
      bytes = rank_bytes(plan, batch, tokens, cost_, world_size);
    for (int r = 0; r < world_size; ++r)
      if (bytes.peak(r) > cost_.capacity_bytes * (1.0 + 1e-12))
        throw DoesNotFit(fmt::format(
            "{}: rank {} would hold {} at step {} ({} for its largest micro-batch with the model state, {} "
            "for the patches it encodes), more than {}",
            policy_, r, bytes_text(bytes.peak(r)), batch.step, bytes_text(bytes.llm[r]),
            bytes_text(bytes.encoder[r]), memory_summary(cost_)));
    return plan;
  }

 private:
  std::string policy_;
  CostModel cost_;
  PlannerFactory make_;
  std::unique_ptr<Planner> unbounded_;
  bool deterministic_;
};

}  // namespace

std::string bytes_text(double bytes) {
  if (bytes >= kGiB) return fmt::format("{:.2f} GiB", bytes / kGiB);
  if (bytes >= 1024.0 * 1024.0) return fmt::format("{:.2f} MiB", bytes / (1024.0 * 1024.0));
  return fmt::format("{:.1f} KiB", bytes / 1024.0);
}

std::string memory_summary(const CostModel& cost) {
  return fmt::format(
      "{} per rank{}: {} parameters, gradients and AdamW moments", bytes_text(cost.capacity_bytes),
      cost.capacity_source.empty() ? "" : " (" + cost.capacity_source + ")", bytes_text(cost.memory.state));
}

std::vector<double> rank_peak_bytes(const StepPlan& plan, const GlobalBatch& batch, const CostModel& cost,
                                    int world_size) {
  const RankBytes bytes = rank_bytes(plan, batch, batch_sizes(batch).tokens, cost, world_size);
  std::vector<double> peaks(world_size);
  for (int r = 0; r < world_size; ++r) peaks[r] = bytes.peak(r);
  return peaks;
}

void require_batch_fits(const GlobalBatch& batch, const CostModel& cost, int world_size) {
  require_tokens_fit(batch, batch_sizes(batch).tokens, cost, world_size);
}

std::unique_ptr<Planner> memory_bound(const std::string& policy, const CostModel& cost, PlannerFactory make) {
  return std::make_unique<MemoryBoundPlanner>(policy, cost, std::move(make));
}

}  // namespace minimllm
