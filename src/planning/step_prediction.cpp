#include "minimllm/planning/step_prediction.hpp"

#include <algorithm>
#include <numeric>
#include <utility>
#include <vector>

#include "assignment.hpp"
#include "minimllm/layout/rank_work.hpp"
#include "minimllm/planning/plan_traffic.hpp"
#include "pipeline_stages.hpp"

namespace minimllm {
namespace {

// What predict() needs of each LLM group.
struct GroupShape {
  int size = 1;
  bool spans = false;
  std::vector<int> nodes, members;  // the nodes the group's ranks are on (increasing), members on each
  int first = 0, last = 0;          // its lowest and highest rank
  bool contiguous = true;           // its ranks are first .. last (every planner's groups but the deck's)
  double route_per_row = 0.0;       // boundary bytes per row per member

  // Where rank `owner` on node `node` stands to the group: how many members are on its node, and whether
  // it is one of them. O(1) for groups on one node of consecutive ranks (the common case: this runs once
  // per image).
  std::pair<int, bool> presence(const std::vector<int>& ranks, int node, int owner) const {
    int on_node = 0;
    if (nodes.size() == 1) {
      on_node = node == nodes.front() ? members.front() : 0;
    } else {
      const auto it = std::lower_bound(nodes.begin(), nodes.end(), node);
      on_node = it != nodes.end() && *it == node ? members[it - nodes.begin()] : 0;
    }
    const bool member = on_node > 0 && (contiguous ? owner >= first && owner <= last
                                                   : std::binary_search(ranks.begin(), ranks.end(), owner));
    return {on_node, member};
  }
};

// The (stage, rank) cells a prediction fills, numbered stage by stage. With one stage (colocated), every
// rank: cell r. With the disaggregated pipeline's stages, only the ranks a stage touches (its images'
// owners and its groups' members): such a plan can have thousands of stages of a few ranks each (4,096 x
// 1,024 for disagg on a DGX-sized machine), where dense stage x rank tables took 330 ms a prediction. A
// cell absent from a stage holds zero everywhere, so sums and maxima over the cells are those over the
// dense table.
class StageCells {
 public:
  StageCells(int world_size, const std::vector<int>& item_owner)
      : begin_{0, world_size}, rank_(world_size), item_owner_(&item_owner) {
    std::iota(rank_.begin(), rank_.end(), 0);
  }
  StageCells(const StepPlan& plan, const GlobalBatch& batch, const std::vector<int>& stage_of_sample,
             int stages, int world_size)
      : begin_(stages + 1, 0), image_cell_(plan.item_owner.size()) {
    // Every (stage, rank, image) a stage touches, image -1 for a group's member; ordered by stage, then
    // rank, by two stable counting passes (rank, then stage); a cell per distinct (stage, rank).
    struct Touch {
      int stage, rank, image;
    };
    std::vector<Touch> touches;
    touches.reserve(plan.item_owner.size());
    int image = 0;
    for (size_t s = 0; s < batch.samples.size(); ++s)
      for (size_t i = 0; i < batch.samples[s].items.size(); ++i, ++image)
        touches.push_back({stage_of_sample[s], plan.item_owner[image], image});
    std::vector<int> stamp(stages, -1);  // the last group seen busy in each stage
    for (size_t k = 0; k < plan.llm_groups.size(); ++k)
      for (int s : plan.llm_groups[k].samples) {
        const int m = stage_of_sample[s];
        if (stamp[m] == static_cast<int>(k)) continue;
        stamp[m] = static_cast<int>(k);
        for (int r : plan.llm_groups[k].ranks) touches.push_back({m, r, -1});
      }
    const auto stable_by = [&](int keys, auto key) {
      std::vector<int> next(keys + 1, 0);
      for (const Touch& t : touches) ++next[key(t) + 1];
      for (int k = 0; k < keys; ++k) next[k + 1] += next[k];
      std::vector<Touch> sorted(touches.size());
      for (const Touch& t : touches) sorted[next[key(t)]++] = t;
      touches = std::move(sorted);
    };
    stable_by(world_size, [](const Touch& t) { return t.rank; });
    stable_by(stages, [](const Touch& t) { return t.stage; });
    for (size_t i = 0; i < touches.size(); ++i) {
      const Touch& t = touches[i];
      if (i == 0 || t.stage != touches[i - 1].stage || t.rank != touches[i - 1].rank) {
        rank_.push_back(t.rank);
        ++begin_[t.stage + 1];
      }
      if (t.image >= 0) image_cell_[t.image] = static_cast<int>(rank_.size()) - 1;
    }
    for (int m = 0; m < stages; ++m) begin_[m + 1] += begin_[m];
  }

  int size() const { return static_cast<int>(rank_.size()); }
  int stages() const { return static_cast<int>(begin_.size()) - 1; }
  int begin(int m) const { return begin_[m]; }
  int end(int m) const { return begin_[m + 1]; }
  int rank(int cell) const { return rank_[cell]; }
  // The cell of image i (in its sample's stage, on its owner).
  int of_image(int i) const { return item_owner_ ? (*item_owner_)[i] : image_cell_[i]; }
  // The cell of rank r in stage m, where r is a member of a group busy in m or an image's owner.
  int cell(int m, int r) const {
    if (item_owner_) return r;
    return static_cast<int>(std::lower_bound(rank_.begin() + begin_[m], rank_.begin() + begin_[m + 1], r) -
                            rank_.begin());
  }

 private:
  std::vector<int> begin_, rank_;  // stage m's cells: [begin_[m], begin_[m + 1]); each cell's rank
  std::vector<int> image_cell_;    // several stages: each image's cell
  const std::vector<int>* item_owner_ = nullptr;  // one stage: the cell of an image is its owner
};

// Boundary exchange: each image's rows go from its encoder rank to the members of its sample's group
// (rows / g each; the owner keeps its own share), paid per row at the link to each receiver's node. A
// group's receive time is shared evenly by its members. Returns the sender's time (= the group's).
// `seconds_per_byte`: 1 / bandwidth within and between nodes (no division per image).
double item_route_time(const LlmGroup& group, const GroupShape& shape, const double (&seconds_per_byte)[2],
                       int owner_node, int owner, double patches) {
  const auto [on_node, member] = shape.presence(group.ranks, owner_node, owner);
  const double local = on_node - member, remote = shape.size - on_node;
  return patches * shape.route_per_row * (local * seconds_per_byte[0] + remote * seconds_per_byte[1]);
}

// Each rank's latency per stage (cell): the larger of what it sends (send) and what its group hears
// (receive, per stage and group; a group that hears nothing in a stage may have no cells there).
std::vector<double> rank_latency(const StepPlan& plan, std::vector<double> send,
                                 const std::vector<double>& receive, const StageCells& cells) {
  const int n_groups = static_cast<int>(plan.llm_groups.size());
  for (int m = 0; m < cells.stages(); ++m)
    for (int k = 0; k < n_groups; ++k) {
      const double heard = receive[m * n_groups + k];
      if (heard <= 0.0) continue;
      for (int r : plan.llm_groups[k].ranks) {
        double& latency = send[cells.cell(m, r)];
        latency = std::max(latency, heard);
      }
    }
  return send;
}

// Latency of the boundary exchange, one direction, as a pairwise all-to-all (cost_model.hpp): a message
// step per peer, at the link to that peer. A sender's peers are the members of the groups its images go
// to; a group's members each hear from the images' owners. Distinct (stage, owner, group) routes are
// found group by group: a group's samples come stage by stage, so a stamp per owner suffices. O(images).
std::vector<double> route_latency(const CostModel& cost, const StepPlan& plan, const GlobalBatch& batch,
                                  const std::vector<GroupShape>& shapes, const std::vector<int>& node_of_rank,
                                  const std::vector<int>& stage_of_sample, const StageCells& cells,
                                  int world_size) {
  const int n_groups = static_cast<int>(shapes.size());
  const std::vector<int> first_item = first_item_of_samples(batch);
  std::vector<double> send(cells.size(), 0.0), receive(cells.stages() * n_groups, 0.0);
  std::vector<int> stamp(world_size, -1);
  for (int k = 0; k < n_groups; ++k) {
    const GroupShape& shape = shapes[k];
    const std::vector<int>& ranks = plan.llm_groups[k].ranks;
    for (int s : plan.llm_groups[k].samples) {
      const int m = stage_of_sample[s], route = m * n_groups + k;
      for (int i = first_item[s]; i < first_item[s + 1]; ++i) {
        const int owner = plan.item_owner[i];
        if (stamp[owner] == route || (shape.size == 1 && owner == ranks.front())) continue;
        stamp[owner] = route;
        const auto [on_node, member] = shape.presence(ranks, node_of_rank[owner], owner);
        const bool near = on_node > 0;
        send[cells.cell(m, owner)] +=
            (on_node - member) * cost.intra_node.latency + (shape.size - on_node) * cost.inter_node.latency;
        receive[route] += cost.link(!near).latency;
      }
    }
  }
  return rank_latency(plan, std::move(send), receive, cells);
}

}  // namespace

double route_check_time(const CostModel& cost, int world_size) {
  if (world_size <= 1) return 0.0;
  // MPI's algorithms for messages this small are logarithmic: Bruck's all-to-all (ceil(log2 n) steps,
  // each moving half the blocks: 3 ints per rank) and a recursive-doubling all-reduce (the tree).
  const Network net{cost.intra_node, cost.inter_node, CollectiveAlgorithm::tree};
  const GroupSpan span = cost.span_of(0, world_size);
  const double half_blocks = 3.0 * sizeof(int) * world_size / 2.0;
  const auto steps = [&](const LinkCost& link, int n) {
    return collective_steps(CollectiveAlgorithm::tree, n) * (link.latency + half_blocks / link.bandwidth);
  };
  const double all_to_all = steps(net.intra, span.per_node) + steps(net.inter, span.nodes);
  return all_to_all + net.all_reduce(span, sizeof(int));
}

namespace {

// predict(), or with `exact` false (colocated plans only) predict_upper_bound(): the boundary exchange's
// terms bounded instead of routed.
PlanPrediction predict_phases(const StepPlan& plan, const GlobalBatch& batch, const CostModel& cost,
                              int world_size, bool exact) {
  const int n_groups = static_cast<int>(plan.llm_groups.size());
  const bool pipelined = plan.placement == Placement::disaggregated;
  exact = exact || pipelined;
  // The bound's terms are raised by a relative 1e-9, above the rounding of sums taken in another order.
  const double slower_per_byte =
      (1.0 + 1e-9) * std::max(1.0 / cost.intra_node.bandwidth, 1.0 / cost.inter_node.bandwidth);
  const double slower_latency = (1.0 + 1e-9) * std::max(cost.intra_node.latency, cost.inter_node.latency);
  std::vector<int> node_of_rank(world_size), group_of_sample(batch.samples.size(), 0);
  for (int r = 0; r < world_size; ++r) node_of_rank[r] = cost.node_of(r);
  std::vector<GroupShape> shapes(n_groups);
  for (int k = 0; k < n_groups; ++k) {
    const LlmGroup& group = plan.llm_groups[k];
    GroupShape& shape = shapes[k];
    shape.size = static_cast<int>(group.ranks.size());
    shape.spans = node_of_rank[group.ranks.front()] != node_of_rank[group.ranks.back()];
    for (int r : group.ranks) {  // sorted ranks: a node's members are adjacent
      if (shape.nodes.empty() || shape.nodes.back() != node_of_rank[r])
        shape.nodes.push_back(node_of_rank[r]), shape.members.push_back(0);
      ++shape.members.back();
    }
    shape.first = group.ranks.front(), shape.last = group.ranks.back();
    shape.contiguous = shape.last - shape.first + 1 == shape.size;
    shape.route_per_row = cost.boundary_bytes_per_row / shape.size;
    for (int s : group.samples) group_of_sample[s] = k;
  }
  const double seconds_per_byte[2] = {1.0 / cost.intra_node.bandwidth, 1.0 / cost.inter_node.bandwidth};
  // Pipeline stages (disaggregated plans; pipeline_stage in rank_work.hpp); one stage otherwise.
  int stages = 1;
  const std::vector<int> stage_of_sample =
      pipelined ? planning::stage_of_samples(plan.llm_groups, static_cast<int>(batch.samples.size()), &stages)
                : std::vector<int>(batch.samples.size(), 0);
  const StageCells cells = pipelined ? StageCells(plan, batch, stage_of_sample, stages, world_size)
                                     : StageCells(world_size, plan.item_owner);

  // Samples in index order (their metadata lies in that order): per-rank encoder and send times, per-group
  // LLM compute, communication and receive times, each per stage ([cell], [stage * groups + group]).
  std::vector<double> encoder(cells.size(), 0.0), send(cells.size(), 0.0);
  std::vector<double> group_compute(stages * n_groups, 0.0), group_comm(stages * n_groups, 0.0),
      group_receive(stages * n_groups, 0.0);
  double llm_total = 0.0, largest_tokens = 0.0, encoder_total = 0.0, largest_image = 0.0;  // lower bound
  double images_of_largest = 0.0;            // encoder time of the longest sample's largest image
  std::vector<double> latency_of(n_groups);  // the K/V exchange's latency per micro-batch of each group
  for (int k = 0; k < n_groups; ++k) latency_of[k] = cost.llm_comm(0.0, shapes[k].size, shapes[k].spans);
  // The bound of route_latency (inexact predictions): every image a route of its own, a message step per
  // member of its group at the slower link; a group hears from at most one owner per image and rank.
  std::vector<double> send_latency_bound(exact ? 0 : world_size, 0.0),
      images_of_group(exact ? 0 : n_groups, 0.0);
  int image = 0;
  for (size_t s = 0; s < batch.samples.size(); ++s) {
    const SampleMeta& sample = batch.samples[s];
    const int k = group_of_sample[s], m = stage_of_sample[s];
    double tokens = sample.text_len, largest_own_image = 0.0;
    if (!exact) images_of_group[k] += sample.items.size();
    for (const EncoderItem& im : sample.items) {
      const int owner = plan.item_owner[image], cell = cells.of_image(image++);
      const double time = cost.encoder_time(im);
      encoder[cell] += time;
      encoder_total += time, largest_image = std::max(largest_image, time);
      largest_own_image = std::max(largest_own_image, time);
      // Bound: every receiver's rows at the slower link, the owner's own share included.
      const double route = exact ? item_route_time(plan.llm_groups[k], shapes[k], seconds_per_byte,
                                                   node_of_rank[owner], owner, im.rows)
                                 : im.rows * cost.boundary_bytes_per_row * slower_per_byte;
      send[cell] += route, group_receive[m * n_groups + k] += route;
      if (!exact) send_latency_bound[owner] += shapes[k].size * slower_latency;
      tokens += im.rows;
    }
    const double one_rank = cost.llm(tokens);
    group_compute[m * n_groups + k] += one_rank / shapes[k].size;
    // The K/V exchange's bandwidth term per sample; its latency per micro-batch (below).
    group_comm[m * n_groups + k] += cost.llm_comm(tokens, shapes[k].size, shapes[k].spans) - latency_of[k];
    llm_total += one_rank;
    if (tokens > largest_tokens) largest_tokens = tokens, images_of_largest = largest_own_image;
  }
  // Each micro-batch's K/V exchange is one all-gather and one reduce-scatter per layer over all its
  // samples' rows (step_executor.cpp): its latency is paid once per micro-batch, not per sample. A
  // pipeline stage holds one micro-batch of each group.
  for (int k = 0; k < n_groups; ++k) {
    const LlmGroup& group = plan.llm_groups[k];
    if (group.samples.empty()) continue;
    if (!pipelined) {
      group_comm[k] += latency_of[k] * group.micro_batches;
      continue;
    }
    std::vector<char> busy(stages, 0);
    for (int s : group.samples) busy[stage_of_sample[s]] = 1;
    for (int m = 0; m < stages; ++m)
      if (busy[m]) group_comm[m * n_groups + k] += latency_of[k];
  }
  // Pipeline parallelism (CostModel::pipeline_stages, layout/model_parallel.hpp): m micro-batches through p
  // stages take (m + p - 1) / m of a group's work, 1F1B's bubble.
  double longest_bubble = 0.0;
  if (cost.pipeline_stages > 1)
    for (int k = 0; k < n_groups; ++k) {
      const double extra = (cost.pipeline_stages - 1.0) / std::max(1, plan.llm_groups[k].micro_batches);
      double bubble = 0.0;
      for (int m = 0; m < stages; ++m) {
        double &compute = group_compute[m * n_groups + k], &comm = group_comm[m * n_groups + k];
        bubble += extra * (compute + comm);
        compute *= 1.0 + extra, comm *= 1.0 + extra;
      }
      longest_bubble = std::max(longest_bubble, bubble);
    }
  // Per stage and rank: LLM time (its group's) and boundary time (the larger of its sends and its share of
  // its group's receives; both directions). A group idle in a stage (all three zero) may have no cells there.
  std::vector<double> llm(cells.size(), 0.0), llm_comm(world_size, 0.0), boundary = send;
  for (int m = 0; m < stages; ++m)
    for (int k = 0; k < n_groups; ++k) {
      const int gk = m * n_groups + k;
      if (group_compute[gk] == 0.0 && group_comm[gk] == 0.0 && group_receive[gk] == 0.0) continue;
      for (int r : plan.llm_groups[k].ranks) {
        const int cell = cells.cell(m, r);
        llm[cell] = group_compute[gk] + group_comm[gk];
        llm_comm[r] += group_comm[gk];
        boundary[cell] = std::max(boundary[cell], group_receive[gk] / shapes[k].size);
      }
    }
  // Each exchange (forward and backward) pays a message step per peer (route_latency).
  std::vector<double> latency;
  if (exact) {
    latency = route_latency(cost, plan, batch, shapes, node_of_rank, stage_of_sample, cells, world_size);
  } else {
    std::vector<double> receive_latency_bound(n_groups);
    for (int k = 0; k < n_groups; ++k)
      receive_latency_bound[k] = std::min<double>(images_of_group[k], world_size) * slower_latency;
    latency = rank_latency(plan, std::move(send_latency_bound), receive_latency_bound, cells);
  }
  for (size_t i = 0; i < boundary.size(); ++i) boundary[i] += 2.0 * latency[i];
  const auto slowest = [&](const std::vector<double>& v, int m) {  // the values are >= 0
    double most = 0.0;
    for (int c = cells.begin(m); c < cells.end(m); ++c) most = std::max(most, v[c]);
    return most;
  };

  PlanPrediction p;
  p.bubble = longest_bubble;
  // Per rank, summed over the stages in order.
  std::vector<double> busy(world_size, 0.0), rank_encoder(world_size, 0.0), rank_llm(world_size, 0.0);
  for (int c = 0; c < cells.size(); ++c) {
    const int r = cells.rank(c);
    busy[r] += encoder[c] + boundary[c] + llm[c];
    rank_encoder[r] += encoder[c], rank_llm[r] += llm[c];
  }
  for (int r = 0; r < world_size; ++r) p.encoder = std::max(p.encoder, rank_encoder[r]);
  for (int r = 0; r < world_size; ++r) p.llm = std::max(p.llm, rank_llm[r]);
  if (!pipelined) {
    p.boundary = slowest(boundary, 0);
    p.makespan = p.encoder + p.boundary + p.llm;
  } else {
    // Dataflow pipeline (step_executor.cpp): each encoder rank runs the forward of every stage in order,
    // then the backward of every stage in order, each once the gradients of its rows have come back; each
    // LLM group runs its micro-batches in order, each once its image rows have arrived. A transfer takes
    // half of the stage's slowest boundary time (one direction, its latency included).
    std::vector<double> transfer(stages), forward_done(cells.size(), 0.0);
    for (int m = 0; m < stages; ++m) transfer[m] = 0.5 * slowest(boundary, m);
    std::vector<char> is_encoder(world_size, 0);
    for (int r : plan.encoder_ranks) is_encoder[r] = 1;
    std::vector<double> encoder_clock(world_size, 0.0);  // each encoder rank's time so far
    for (int position = 0; position < stages; ++position) {
      const int m = forward_stage(position, stages);
      for (int c = cells.begin(m); c < cells.end(m); ++c)
        if (is_encoder[cells.rank(c)])
          forward_done[c] = encoder_clock[cells.rank(c)] += cost.step.encoder_forward_share * encoder[c];
    }
    // Rows of stage m reach group k when the last of their encoder ranks has finished stage m's forward.
    const std::vector<int> first_item = first_item_of_samples(batch);
    std::vector<double> rows_ready(stages * n_groups, 0.0), group_end(stages * n_groups, 0.0);
    for (size_t s = 0; s < batch.samples.size(); ++s) {
      const int k = group_of_sample[s], m = stage_of_sample[s];
      for (int i = first_item[s]; i < first_item[s + 1]; ++i)
        rows_ready[m * n_groups + k] =
            std::max(rows_ready[m * n_groups + k], forward_done[cells.of_image(i)] + transfer[m]);
    }
    double end = 0.0;
    for (int k = 0; k < n_groups; ++k) {
      double t = 0.0;
      for (int m = 0; m < stages; ++m) {
        const double work = group_compute[m * n_groups + k] + group_comm[m * n_groups + k];
        group_end[m * n_groups + k] = t = std::max(t, rows_ready[m * n_groups + k]) + work;
      }
      end = std::max(end, t);
    }
    // Gradients of stage m reach encoder rank r when the last group holding its rows has finished stage m.
    std::vector<double> gradients_ready(cells.size(), 0.0);
    for (size_t s = 0; s < batch.samples.size(); ++s) {
      const int k = group_of_sample[s], m = stage_of_sample[s];
      for (int i = first_item[s]; i < first_item[s + 1]; ++i) {
        double& ready = gradients_ready[cells.of_image(i)];
        ready = std::max(ready, group_end[m * n_groups + k] + transfer[m]);
      }
    }
    // The backward of every stage in order, from the end of the forwards.
    for (int c = 0; c < cells.size(); ++c) {
      const int r = cells.rank(c);
      const double work = (1.0 - cost.step.encoder_forward_share) * encoder[c];
      if (is_encoder[r] && work > 0.0)
        encoder_clock[r] = std::max(encoder_clock[r], gradients_ready[c]) + work;
    }
    for (int r : plan.encoder_ranks) end = std::max(end, encoder_clock[r]);
    // On the critical path for certain: the first stage's rows and the last stage's gradients (the other
    // transfers overlap compute).
    p.boundary = transfer[forward_stage(0, stages)] + transfer[stages - 1];
    p.makespan = end;
  }
  double total_busy = 0.0;
  for (double b : busy) total_busy += b;
  if (p.makespan > 0.0) {
    p.idle_fraction = std::max(0.0, 1.0 - total_busy / world_size / p.makespan);
    double slowest_comm = 0.0, slowest_llm = -1.0;
    for (int r = 0; r < world_size; ++r)
      if (rank_llm[r] > slowest_llm) slowest_llm = rank_llm[r], slowest_comm = llm_comm[r];
    p.comm_fraction = (p.boundary + slowest_comm) / p.makespan;
  }
  if (!batch.samples.empty()) {
    const double largest_sample = planning::llm_lower_bound(0.0, largest_tokens, cost, world_size);
    if (!pipelined) {
      // The phases run one after the other on all ranks.
      p.lower_bound = std::max(encoder_total / world_size, largest_image) +
                      std::max(llm_total / world_size, largest_sample);
    } else {
      // Encoder and LLM overlap, on disjoint ranks: all the work over all ranks, or the longest sample's
      // chain (its largest image, then its LLM work at its best group size), or the largest image.
      p.lower_bound = std::max(
          {(encoder_total + llm_total) / world_size, images_of_largest + largest_sample, largest_image});
    }
  }
  return p;
}

}  // namespace

PlanPrediction predict(const StepPlan& plan, const GlobalBatch& batch, const CostModel& cost,
                       int world_size) {
  return predict_phases(plan, batch, cost, world_size, true);
}

PlanPrediction predict_upper_bound(const StepPlan& plan, const GlobalBatch& batch, const CostModel& cost,
                                   int world_size) {
  return predict_phases(plan, batch, cost, world_size, false);
}

PlanPrediction predict_step(const StepPlan& plan, const GlobalBatch& batch, const CostModel& cost,
                            int world_size) {
  PlanPrediction p = predict(plan, batch, cost, world_size);
  const StepCost& step = cost.step;

  // Inputs each rank packs: the encoder items it encodes (per module: items and their rows) and its share
  // of its group's rows.
  const size_t modules = cost.encoders.size();
  std::vector<std::vector<double>> items(modules, std::vector<double>(world_size, 0.0)),
      item_rows(modules, std::vector<double>(world_size, 0.0));
  std::vector<double> rows(world_size, 0.0), total_items(modules, 0.0), total_item_rows(modules, 0.0);
  double total_rows = 0.0;
  int item = 0;
  for (const SampleMeta& sample : batch.samples)
    for (const EncoderItem& im : sample.items) {
      const int owner = plan.item_owner[item++];
      items.at(im.module)[owner] += 1.0, item_rows[im.module][owner] += im.rows;
    }
  for (const LlmGroup& group : plan.llm_groups) {
    double tokens = 0.0;
    for (int s : group.samples) tokens += batch.samples[s].tokens();
    for (int r : group.ranks) rows[r] += tokens / group.ranks.size();
  }
  double data_max = 0.0, data_sum = 0.0;
  for (int r = 0; r < world_size; ++r) {
    double d = step.data_c;
    for (size_t m = 0; m < modules; ++m) {
      d += cost.encoders[m].data_per_item * items[m][r];
      d += cost.encoders[m].data_per_row * item_rows[m][r];
      total_items[m] += items[m][r], total_item_rows[m] += item_rows[m][r];
    }
    d += step.data_per_token * rows[r];
    data_max = std::max(data_max, d), data_sum += d;
    total_rows += rows[r];
  }
  // The run moves the samples from their loaders first (step/sample_movement.hpp), in its data phase.
  p.movement = movement_seconds(plan, batch, cost, world_size);
  p.data = data_max + p.movement;
  // Each boundary exchange checks its route when it is built: one per step, or per pipeline stage.
  int exchanges = 1;
  if (plan.placement == Placement::disaggregated)
    planning::stage_of_samples(plan.llm_groups, static_cast<int>(batch.samples.size()), &exchanges);
  const double check = route_check_time(cost, world_size);
  p.boundary += exchanges * check;
  p.grad_sync = cost.grad_sync(world_size);
  p.optimizer = step.optimizer;

  const double phases = p.makespan;
  const double fixed = p.grad_sync + p.optimizer + exchanges * check;
  p.makespan = phases + p.data + fixed;
  double data_work = 0.0;
  for (size_t m = 0; m < modules; ++m) {
    data_work += cost.encoders[m].data_per_item * total_items[m];
    data_work += cost.encoders[m].data_per_row * total_item_rows[m];
  }
  data_work += step.data_per_token * total_rows;
  p.lower_bound += p.grad_sync + p.optimizer + check + step.data_c + data_work / world_size;
  if (p.makespan > 0.0) {
    p.idle_fraction = (p.idle_fraction * phases + (data_max - data_sum / world_size)) / p.makespan;
    p.comm_fraction = (p.comm_fraction * phases + p.grad_sync + exchanges * check + p.movement) / p.makespan;
  }
  return p;
}

}  // namespace minimllm
