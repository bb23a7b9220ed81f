#include "minimllm/planning/plan_traffic.hpp"

#include <algorithm>
#include <vector>

namespace minimllm {

double sample_input_bytes(const SampleMeta& sample, const CostModel& cost) {
  double bytes = cost.input_bytes_per_token * sample.text_len;
  for (const EncoderItem& image : sample.items) bytes += cost.input_bytes(image);
  return bytes;
}

namespace {

// A group's members per node, to split what a rank sends to all of them into intra- and inter-node bytes.
struct Spread {
  std::vector<int> nodes, members;  // increasing nodes, members on each
  const std::vector<int>* ranks = nullptr;
  // Bytes `per_member` from rank `from` to every member: added to traffic by where they go.
  void send(int from, double per_member, const CostModel& cost, PlanTraffic& traffic) const {
    const int node = cost.node_of(from);
    const auto it = std::lower_bound(nodes.begin(), nodes.end(), node);
    const int on_node = it != nodes.end() && *it == node ? members[it - nodes.begin()] : 0;
    const bool member = on_node > 0 && std::binary_search(ranks->begin(), ranks->end(), from);
    const int total = static_cast<int>(ranks->size());
    traffic.intra_node_bytes += per_member * (on_node - (member ? 1 : 0));
    traffic.inter_node_bytes += per_member * (total - on_node);
  }
};

}  // namespace

PlanTraffic plan_traffic(const StepPlan& plan, const GlobalBatch& batch, const CostModel& cost,
                         int world_size) {
  PlanTraffic traffic;
  const int n = static_cast<int>(batch.samples.size());
  std::vector<Spread> spreads(plan.llm_groups.size());
  std::vector<int> group_of_sample(n, -1);
  for (size_t k = 0; k < plan.llm_groups.size(); ++k) {
    const LlmGroup& group = plan.llm_groups[k];
    Spread& spread = spreads[k];
    spread.ranks = &group.ranks;
    for (int r : group.ranks) {  // sorted ranks: a node's members are adjacent
      if (spread.nodes.empty() || spread.nodes.back() != cost.node_of(r))
        spread.nodes.push_back(cost.node_of(r)), spread.members.push_back(0);
      ++spread.members.back();
    }
    for (int s : group.samples) group_of_sample[s] = static_cast<int>(k);
  }
  int image = 0;
  for (int s = 0; s < n; ++s) {
    const SampleMeta& sample = batch.samples[s];
    const int loader = sample_loader_rank(s, n, world_size);
    const Spread& spread = spreads[group_of_sample[s]];
    const double g = static_cast<double>(spread.ranks->size());
    spread.send(loader, cost.input_bytes_per_token * sample.text_len, cost, traffic);
    for (const EncoderItem& im : sample.items) {
      const int owner = plan.item_owner[image++];
      const double pixels = cost.input_bytes(im);
      if (owner != loader)
        (cost.node_of(owner) == cost.node_of(loader) ? traffic.intra_node_bytes : traffic.inter_node_bytes) +=
            pixels;
      spread.send(owner, cost.boundary_bytes_per_row * im.rows / g, cost, traffic);
    }
  }
  return traffic;
}

double movement_seconds(const StepPlan& plan, const GlobalBatch& batch, const CostModel& cost,
                        int world_size) {
  const int n = static_cast<int>(batch.samples.size());
  std::vector<int> group_of_sample(n, -1);
  for (size_t k = 0; k < plan.llm_groups.size(); ++k)
    for (int s : plan.llm_groups[k].samples) group_of_sample[s] = static_cast<int>(k);
  // Per rank, what it sends and receives: latency (a message step per peer) and bytes over bandwidth.
  std::vector<double> send(world_size, 0.0), receive(world_size, 0.0);
  // Loaders come in increasing order with the samples, so a (loader, peer) pair is new unless the peer
  // last heard from this very loader.
  std::vector<int> last_loader(world_size, -1);
  const auto move = [&](int from, int to, double bytes) {
    if (from == to || bytes <= 0.0) return;
    const LinkCost& link = cost.link(cost.node_of(from) != cost.node_of(to));
    if (last_loader[to] != from) {
      last_loader[to] = from;
      send[from] += link.latency, receive[to] += link.latency;
    }
    send[from] += bytes / link.bandwidth, receive[to] += bytes / link.bandwidth;
  };
  int image = 0;
  for (int s = 0; s < n; ++s) {
    const SampleMeta& sample = batch.samples[s];
    const int loader = sample_loader_rank(s, n, world_size);
    const std::vector<int>& ranks = plan.llm_groups[group_of_sample[s]].ranks;
    const double per_member = cost.input_bytes_per_token * sample.text_len;
    for (int r : ranks) move(loader, r, per_member);
    for (const EncoderItem& im : sample.items) move(loader, plan.item_owner[image++], cost.input_bytes(im));
  }
  double slowest = 0.0;
  for (int r = 0; r < world_size; ++r) slowest = std::max({slowest, send[r], receive[r]});
  return slowest;
}

}  // namespace minimllm
