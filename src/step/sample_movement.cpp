#include "minimllm/step/sample_movement.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "minimllm/layout/plan_prediction.hpp"  // sample_loader_rank

namespace minimllm {
namespace {

static_assert(sizeof(int) == 4 && sizeof(float) == 4, "token ids and pixels travel as 4-byte words");

std::size_t text_bytes(const SampleMeta& sample) {
  return sizeof(int) * static_cast<std::size_t>(sample.text_len);
}
std::size_t pixel_bytes(const EncoderItem& image, int patch_dim) {
  return sizeof(float) * static_cast<std::size_t>(image.rows) * static_cast<std::size_t>(patch_dim);
}

template <class T>
void append_bytes(std::vector<unsigned char>& out, const std::vector<T>& values) {
  const std::size_t base = out.size();
  out.resize(base + sizeof(T) * values.size());
  if (!values.empty()) std::memcpy(out.data() + base, values.data(), sizeof(T) * values.size());
}

}  // namespace

SampleInputs SampleInputs::generate(const Sampler& sampler, const GlobalBatch& batch,
                                    const std::vector<int>& samples, const std::vector<int>& images) {
  SampleInputs in;
  in.patch_dim_ = sampler.patch_dim();
  for (int s : samples) {
    in.text_[s] = {in.bytes_.size(), static_cast<std::size_t>(batch.samples[s].text_len)};
    append_bytes(in.bytes_, sampler.text_tokens(batch.step, batch.samples[s]));
  }
  const std::vector<int> first_item = first_item_of_samples(batch);
  std::vector<float> pixels;
  for (int image : images) {
    const int s =
        static_cast<int>(std::upper_bound(first_item.begin(), first_item.end(), image) - first_item.begin()) -
        1;
    pixels.clear();
    sampler.append_image_patches(batch.step, batch.samples[s], image - first_item[s], pixels);
    in.pixels_[image] = {in.bytes_.size(), pixels.size()};
    append_bytes(in.bytes_, pixels);
  }
  return in;
}

SampleInputs SampleInputs::move(const Sampler& sampler, const GlobalBatch& batch, const StepPlan& plan,
                                Communicator& world) {
  const int ranks = world.size(), me = world.rank(), n = static_cast<int>(batch.samples.size());
  const int patch_dim = sampler.patch_dim();
  const std::vector<int> first_item = first_item_of_samples(batch);
  std::vector<int> group_of_sample(n, -1);
  int my_group = -1;  // a rank runs at most one LLM group
  for (size_t k = 0; k < plan.llm_groups.size(); ++k) {
    const LlmGroup& group = plan.llm_groups[k];
    for (int s : group.samples) group_of_sample[s] = static_cast<int>(k);
    if (std::find(group.ranks.begin(), group.ranks.end(), me) != group.ranks.end())
      my_group = static_cast<int>(k);
  }
  for (int s = 0; s < n; ++s)
    if (group_of_sample[s] < 0)
      throw std::logic_error(
          fmt::format("sample movement: sample {} of step {} is in no LLM group", s, batch.step));

  // What arrives here, from each loader in turn (loaders hold contiguous shards, so this is sample order):
  // each sample's token ids when it runs in this rank's group, then the pixels of its images encoded here.
  SampleInputs in;
  in.patch_dim_ = patch_dim;
  std::vector<std::size_t> recv_counts(ranks, 0);
  std::size_t offset = 0;
  for (int s = 0; s < n; ++s) {
    const SampleMeta& sample = batch.samples[s];
    const int loader = sample_loader_rank(s, n, ranks);
    if (group_of_sample[s] == my_group) {
      in.text_[s] = {offset, static_cast<std::size_t>(sample.text_len)};
      offset += text_bytes(sample), recv_counts[loader] += text_bytes(sample);
    }
    for (size_t i = 0; i < sample.items.size(); ++i) {
      const int image = first_item[s] + static_cast<int>(i);
      if (plan.item_owner[image] != me) continue;
      in.pixels_[image] = {offset, pixel_bytes(sample.items[i], patch_dim) / sizeof(float)};
      offset += pixel_bytes(sample.items[i], patch_dim),
          recv_counts[loader] += pixel_bytes(sample.items[i], patch_dim);
    }
  }

  // What this rank's loader sends, in the same order per destination: only its own shard is generated.
  std::vector<std::vector<unsigned char>> to(ranks);
  std::vector<float> pixels;
  for (int s = 0; s < n; ++s) {
    if (sample_loader_rank(s, n, ranks) != me) continue;
    const SampleMeta& sample = batch.samples[s];
    const std::vector<int> tokens = sampler.text_tokens(batch.step, sample);
    for (int r : plan.llm_groups[group_of_sample[s]].ranks) append_bytes(to[r], tokens);
    for (size_t i = 0; i < sample.items.size(); ++i) {
      pixels.clear();
      sampler.append_image_patches(batch.step, sample, static_cast<int>(i), pixels);
      append_bytes(to[plan.item_owner[first_item[s] + static_cast<int>(i)]], pixels);
    }
  }
  std::vector<unsigned char> send;
  std::vector<std::size_t> send_counts(ranks);
  for (int r = 0; r < ranks; ++r) {
    send_counts[r] = to[r].size();
    send.insert(send.end(), to[r].begin(), to[r].end());
    std::vector<unsigned char>().swap(to[r]);
  }
  in.bytes_ = world.alltoallv_bytes(send, send_counts, recv_counts);
  in.received_bytes_ = static_cast<std::int64_t>(offset - recv_counts[me]);
  return in;
}

std::vector<int> SampleInputs::text_tokens(int sample) const {
  const auto at = text_.find(sample);
  if (at == text_.end())
    throw std::logic_error(fmt::format("sample inputs: sample {}'s token ids are not on this rank", sample));
  std::vector<int> tokens(at->second.words);
  if (!tokens.empty())
    std::memcpy(tokens.data(), bytes_.data() + at->second.offset, sizeof(int) * tokens.size());
  return tokens;
}

void SampleInputs::append_pixels(int image, std::vector<float>& out) const {
  const auto at = pixels_.find(image);
  if (at == pixels_.end())
    throw std::logic_error(fmt::format("sample inputs: image {}'s pixels are not on this rank", image));
  const std::size_t base = out.size(), count = at->second.words;
  out.resize(base + count);
  if (count > 0) std::memcpy(out.data() + base, bytes_.data() + at->second.offset, sizeof(float) * count);
}

}  // namespace minimllm
