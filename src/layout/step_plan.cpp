#include "minimllm/layout/step_plan.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <numeric>
#include <stdexcept>

#include "minimllm/core/world.hpp"

namespace minimllm {

const char* to_string(Placement placement) {
  return placement == Placement::colocated ? "colocated" : "disaggregated";
}

std::vector<int> first_item_of_samples(const GlobalBatch& batch) {
  std::vector<int> first(batch.samples.size() + 1, 0);
  for (size_t s = 0; s < batch.samples.size(); ++s)
    first[s + 1] = first[s] + static_cast<int>(batch.samples[s].items.size());
  return first;
}

namespace {

// Little helpers for the plan's bytes: values in native layout (every rank of a run shares one), vectors
// and strings with their length first.
class PlanWriter {
 public:
  template <typename T>
  void value(const T& v) {
    bytes_.append(reinterpret_cast<const char*>(&v), sizeof(T));
  }
  void ints(const std::vector<int>& v) {
    value(static_cast<std::int64_t>(v.size()));
    bytes_.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(int));
  }
  void text(const std::string& s) {
    value(static_cast<std::int64_t>(s.size()));
    bytes_.append(s);
  }
  std::string bytes_;
};

class PlanReader {
 public:
  explicit PlanReader(const std::string& bytes) : bytes_(bytes) {}
  template <typename T>
  T value() {
    T v;
    std::memcpy(&v, take(sizeof(T)), sizeof(T));
    return v;
  }
  std::vector<int> ints() {
    const std::size_t n = length(sizeof(int));
    std::vector<int> v(n);
    if (n > 0) std::memcpy(v.data(), take(n * sizeof(int)), n * sizeof(int));
    return v;
  }
  std::string text() {
    const std::size_t n = length(1);
    return std::string(take(n), n);
  }
  bool done() const { return at_ == bytes_.size(); }

 private:
  std::size_t length(std::size_t element) {
    const auto n = value<std::int64_t>();
    if (n < 0 || static_cast<std::size_t>(n) > (bytes_.size() - at_) / element)
      throw std::invalid_argument("serialised plan: a length runs past its end");
    return static_cast<std::size_t>(n);
  }
  const char* take(std::size_t n) {
    if (n > bytes_.size() - at_) throw std::invalid_argument("serialised plan: truncated");
    const char* p = bytes_.data() + at_;
    at_ += n;
    return p;
  }
  const std::string& bytes_;
  std::size_t at_ = 0;
};

}  // namespace

std::string serialize_plan(const StepPlan& plan) {
  PlanWriter w;
  w.text(plan.policy);
  w.text(plan.origin.source);
  w.text(plan.origin.solver_status);
  w.value(plan.origin.solver_gap);
  w.value(plan.origin.solver_seconds);
  w.value(static_cast<std::int32_t>(plan.placement));
  w.value(static_cast<std::int64_t>(plan.llm_groups.size()));
  for (const LlmGroup& g : plan.llm_groups) {
    w.ints(g.ranks);
    w.ints(g.samples);
    w.value(static_cast<std::int32_t>(g.micro_batches));
    w.ints(g.micro_batch_ends);
  }
  w.ints(plan.encoder_ranks);
  w.ints(plan.item_owner);
  return std::move(w.bytes_);
}

StepPlan deserialize_plan(const std::string& bytes) {
  PlanReader r(bytes);
  StepPlan plan;
  plan.policy = r.text();
  plan.origin.source = r.text();
  plan.origin.solver_status = r.text();
  plan.origin.solver_gap = r.value<double>();
  plan.origin.solver_seconds = r.value<double>();
  plan.placement = static_cast<Placement>(r.value<std::int32_t>());
  const auto groups = r.value<std::int64_t>();
  if (groups < 0 || groups > static_cast<std::int64_t>(bytes.size()))
    throw std::invalid_argument("serialised plan: bad group count");
  plan.llm_groups.resize(static_cast<std::size_t>(groups));
  for (LlmGroup& g : plan.llm_groups) {
    g.ranks = r.ints();
    g.samples = r.ints();
    g.micro_batches = r.value<std::int32_t>();
    g.micro_batch_ends = r.ints();
  }
  plan.encoder_ranks = r.ints();
  plan.item_owner = r.ints();
  if (!r.done()) throw std::invalid_argument("serialised plan: bytes left over");
  return plan;
}

void validate_plan(const StepPlan& plan, const GlobalBatch& batch, int world_size) {
  const auto fail = [&](const std::string& what) {
    throw std::invalid_argument(
        fmt::format("invalid step plan (policy {}, step {}): {}", plan.policy, batch.step, what));
  };
  std::vector<int> rank_group(world_size, -1), sample_group(batch.samples.size(), -1);
  std::vector<bool> is_encoder(world_size, false);
  if (plan.llm_groups.empty()) fail("no LLM group");
  for (size_t g = 0; g < plan.llm_groups.size(); ++g) {
    const LlmGroup& group = plan.llm_groups[g];
    if (group.ranks.empty()) fail(fmt::format("LLM group {} has no rank", g));
    for (size_t i = 0; i < group.ranks.size(); ++i) {
      const int r = group.ranks[i];
      if (r < 0 || r >= world_size)
        fail(fmt::format("LLM group {} names rank {}; valid ranks are 0..{}", g, r, world_size - 1));
      if (i > 0 && r <= group.ranks[i - 1])
        fail(fmt::format("LLM group {} ranks {} are not sorted and unique", g, group.ranks));
      if (rank_group[r] >= 0) fail(fmt::format("rank {} is in LLM groups {} and {}", r, rank_group[r], g));
      rank_group[r] = static_cast<int>(g);
    }
    for (int s : group.samples) {
      if (s < 0 || s >= static_cast<int>(batch.samples.size()))
        fail(fmt::format("LLM group {} names sample {}; the batch has {} samples", g, s,
                         batch.samples.size()));
      if (sample_group[s] >= 0)
        fail(fmt::format("sample {} is in LLM groups {} and {}", s, sample_group[s], g));
      sample_group[s] = static_cast<int>(g);
    }
    if (group.micro_batches < 1 || group.micro_batches > std::max<int>(1, group.samples.size()))
      fail(fmt::format("LLM group {} has {} micro-batches for {} samples; valid: 1..max(1, samples)", g,
                       group.micro_batches, group.samples.size()));
    const std::vector<int>& ends = group.micro_batch_ends;
    if (!ends.empty() &&
        (static_cast<int>(ends.size()) != group.micro_batches ||
         ends.back() != static_cast<int>(group.samples.size()) || ends.front() < 1 ||
         std::adjacent_find(ends.begin(), ends.end(), std::greater_equal<int>()) != ends.end()))
      fail(fmt::format(
          "LLM group {} micro-batch ends [{}] must rise strictly from >= 1 to its {} samples, one "
          "per micro-batch ({})",
          g, fmt::join(ends, ", "), group.samples.size(), group.micro_batches));
  }
  for (size_t s = 0; s < sample_group.size(); ++s)
    if (sample_group[s] < 0) fail(fmt::format("sample {} is in no LLM group", s));
  if (plan.encoder_ranks.empty()) fail("no encoder rank");
  for (size_t i = 0; i < plan.encoder_ranks.size(); ++i) {
    const int r = plan.encoder_ranks[i];
    if (r < 0 || r >= world_size || (i > 0 && r <= plan.encoder_ranks[i - 1]))
      fail(fmt::format("encoder ranks {} must be sorted, unique and within 0..{}", plan.encoder_ranks,
                       world_size - 1));
    is_encoder[r] = true;
  }
  for (int r = 0; r < world_size; ++r) {
    const bool llm = rank_group[r] >= 0;
    if (plan.placement == Placement::colocated && !(llm && is_encoder[r]))
      fail(fmt::format("colocated placement needs every rank in an LLM group and encoding; rank {} is {}", r,
                       llm ? "not an encoder rank" : "in no LLM group"));
    if (plan.placement == Placement::disaggregated && llm == is_encoder[r])
      fail(fmt::format(
          "disaggregated placement needs every rank in exactly one of the encoder ranks and the LLM "
          "groups; rank {} is in {}",
          r, llm ? "both" : "neither"));
  }
  const int items = first_item_of_samples(batch).back();
  if (static_cast<int>(plan.item_owner.size()) != items)
    fail(fmt::format("item_owner has {} entries for {} items", plan.item_owner.size(), items));
  for (int i = 0; i < items; ++i) {
    const int r = plan.item_owner[i];
    if (r < 0 || r >= world_size || !is_encoder[r])
      fail(fmt::format("item {} is owned by rank {}, not an encoder rank", i, r));
  }
}

void place_items_with_groups(StepPlan& plan, const GlobalBatch& batch) {
  const std::vector<int> first_item = first_item_of_samples(batch);
  plan.item_owner.resize(first_item.back());
  for (const LlmGroup& group : plan.llm_groups) {
    size_t item_in_group = 0;
    for (int s : group.samples)
      for (int i = first_item[s]; i < first_item[s + 1]; ++i, ++item_in_group)
        plan.item_owner[i] = group.ranks[item_in_group % group.ranks.size()];
  }
}

StepPlan deal_in_order(const GlobalBatch& batch, const LayoutShape& shape, const std::string& policy) {
  StepPlan plan;
  plan.policy = policy;
  plan.placement = shape.placement;
  plan.encoder_ranks = shape.encoder_ranks;
  long long ranks = 0, ranks_before = 0;
  for (const auto& group : shape.llm_groups) ranks += group.size();
  const long long n = static_cast<long long>(batch.samples.size());
  int sample = 0;
  for (const auto& ranks_of_group : shape.llm_groups) {
    LlmGroup group;
    group.ranks = ranks_of_group;
    ranks_before += ranks_of_group.size();
    const int end = static_cast<int>(n * ranks_before / ranks);  // cumulative, so blocks cover the batch
    for (; sample < end; ++sample) group.samples.push_back(sample);
    group.micro_batches = std::max(1, std::min<int>(shape.micro_batches, group.samples.size()));
    plan.llm_groups.push_back(std::move(group));
  }
  if (shape.items_follow_groups) {
    place_items_with_groups(plan, batch);
  } else {
    plan.item_owner.resize(first_item_of_samples(batch).back());
    for (size_t i = 0; i < plan.item_owner.size(); ++i)
      plan.item_owner[i] = shape.encoder_ranks[i % shape.encoder_ranks.size()];
  }
  return plan;
}

StepPlan make_grouped_plan(const GlobalBatch& batch, const std::vector<int>& group_sizes) {
  LayoutShape shape;
  int rank = 0;
  for (int size : group_sizes) {
    shape.llm_groups.push_back(consecutive_ranks(rank, size));
    rank += size;
  }
  shape.encoder_ranks = consecutive_ranks(0, rank);
  return deal_in_order(batch, shape, "grouped");
}

StepPlan make_in_order_plan(const GlobalBatch& batch, int world_size, int group_size) {
  if (group_size < 1 || world_size % group_size != 0)
    throw std::invalid_argument(
        fmt::format("in-order plan: group size {} must divide the {} ranks", group_size, world_size));
  StepPlan plan = make_grouped_plan(batch, std::vector<int>(world_size / group_size, group_size));
  plan.policy = "naive";
  return plan;
}

StepPlan make_deck_plan(const RunConfig& config, const GlobalBatch& batch, int world_size) {
  const ParallelConfig& p = config.parallel;
  const std::string& deck = config.deck_path;
  LayoutShape shape;
  shape.placement = p.placement == "disaggregated" ? Placement::disaggregated : Placement::colocated;
  shape.micro_batches = p.micro_batches;
  int encoders = world_size;
  if (shape.placement == Placement::disaggregated) {
    encoders = p.encoder_ranks;
    if (encoders < 1 || encoders >= world_size)
      throw InputError(
          fmt::format("{}: parallel.encoder_ranks = {}: disaggregated placement needs 1 to {} encoder "
                      "ranks on {} MPI ranks (the rest run the LLM)",
                      deck, encoders, world_size - 1, world_size));
  }
  shape.encoder_ranks = consecutive_ranks(0, encoders);
  const int first_llm = shape.placement == Placement::disaggregated ? encoders : 0;
  const int llm_ranks = world_size - first_llm;
  std::vector<int> sizes = p.group_sizes.empty() ? std::vector<int>(llm_ranks, 1) : p.group_sizes;
  if (std::accumulate(sizes.begin(), sizes.end(), 0LL) != llm_ranks)
    throw InputError(
        fmt::format("{}: parallel.group_sizes = [{}]: sizes must sum to the {} LLM ranks of this run "
                    "({} MPI ranks, {} placement)",
                    deck, fmt::join(sizes, ", "), llm_ranks, world_size, p.placement));
  // Rotating layouts regroup the ranks every step: a new partition, on shifted ranks.
  const int shift = p.rotate_groups ? batch.step : 0;
  std::rotate(sizes.begin(), sizes.begin() + shift % sizes.size(), sizes.end());
  int offset = 0;
  for (int size : sizes) {
    std::vector<int> ranks;
    for (int i = 0; i < size; ++i) ranks.push_back(first_llm + (offset + i + shift) % llm_ranks);
    std::sort(ranks.begin(), ranks.end());
    shape.llm_groups.push_back(ranks);
    offset += size;
  }
  shape.items_follow_groups = shape.placement == Placement::colocated && p.encoder_layout == "follow";
  StepPlan plan = deal_in_order(batch, shape, "deck");
  plan.origin.source = "deck";
  return plan;
}

}  // namespace minimllm
