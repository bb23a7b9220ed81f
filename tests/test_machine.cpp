// The machine model and memory that binds: collectives in the alpha-beta model checked by hand, growing
// with the group and dearer across nodes; the machine section, machine files and their precedence; the
// memory model against the model's own accounting; batches and plans that fit or do not; a long sample
// forcing a context-parallel group; every planner's plan under the capacity on the decks and random
// batches; the simulator's fits and peak bytes per rank.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "hdf5_attributes.hpp"
#include "hdf5_records.hpp"
#include "minimllm/config/machine_config.hpp"
#include "minimllm/data/sampler.hpp"
#include "minimllm/driver/cli.hpp"
#include "minimllm/driver/run_setup.hpp"
#include "minimllm/driver/simulator.hpp"
#include "minimllm/kernels/loss.hpp"
#include "minimllm/layout/rank_work.hpp"
#include "minimllm/model/model.hpp"
#include "minimllm/planning/calibration.hpp"
#include "minimllm/planning/cost_model.hpp"
#include "minimllm/planning/memory_fit.hpp"
#include "minimllm/planning/planner.hpp"

namespace minimllm {
namespace {

const std::filesystem::path kInputs = std::filesystem::path(__FILE__).parent_path().parent_path() / "inputs";

RunConfig deck(const std::string& name) { return load_run_config((kInputs / (name + ".yaml")).string()); }

// ---------------------------------------------------------------------------------------------------
// Collectives

TEST(Collectives, RingAndTreeMatchTheFormulasByHand) {
  const LinkCost link{2e-6, 1e9};  // 2 us per step, 1 GB/s
  const double s = 8e6;            // bytes
  const auto ring = CollectiveAlgorithm::ring, tree = CollectiveAlgorithm::tree;
  // n = 8: ring 7 steps, tree 3; (n - 1) / n = 7/8 of the buffer; all-reduce twice both.
  EXPECT_DOUBLE_EQ(all_gather_time(link, ring, 8, s), 7 * 2e-6 + 7.0 / 8 * s / 1e9);
  EXPECT_DOUBLE_EQ(reduce_scatter_time(link, ring, 8, s), 7 * 2e-6 + 7.0 / 8 * s / 1e9);
  EXPECT_DOUBLE_EQ(all_reduce_time(link, ring, 8, s), 14 * 2e-6 + 2 * 7.0 / 8 * s / 1e9);
  EXPECT_DOUBLE_EQ(all_gather_time(link, tree, 8, s), 3 * 2e-6 + 7.0 / 8 * s / 1e9);
  EXPECT_DOUBLE_EQ(all_reduce_time(link, tree, 8, s), 6 * 2e-6 + 2 * 7.0 / 8 * s / 1e9);
  EXPECT_DOUBLE_EQ(collective_steps(tree, 5), 3.0);  // ceil(log2 5)
  EXPECT_DOUBLE_EQ(collective_steps(tree, 2), 1.0);
  EXPECT_DOUBLE_EQ(collective_steps(ring, 2), 1.0);
  EXPECT_DOUBLE_EQ(all_to_all_time(link, 3, 3e6), 3 * 2e-6 + 3e6 / 1e9);
  for (auto algorithm : {ring, tree}) {  // nothing to do on one rank
    EXPECT_EQ(all_gather_time(link, algorithm, 1, s), 0.0);
    EXPECT_EQ(all_reduce_time(link, algorithm, 1, s), 0.0);
  }
  EXPECT_EQ(all_to_all_time(link, 0, 0.0), 0.0);
}

TEST(Collectives, HierarchicalOverNodesByHand) {
  const Network net{{1e-6, 100e9}, {5e-6, 10e9}, CollectiveAlgorithm::ring};
  const double s = 16e6;
  // One node: the intra-node link alone.
  EXPECT_DOUBLE_EQ(net.all_gather({8, 1, 8}, s), 7 * 1e-6 + 7.0 / 8 * s / 100e9);
  // One rank per node: the inter-node link alone, the whole buffer over its one rail.
  EXPECT_DOUBLE_EQ(net.all_reduce({4, 4, 1}, s), 6 * 5e-6 + 2 * 3.0 / 4 * s / 10e9);
  // 16 ranks on 2 nodes: between the nodes on 8 rails (s / 8 each), then within the node.
  const double inter_ag = 1 * 5e-6 + 1.0 / 2 * (s / 8) / 10e9, intra_ag = 7 * 1e-6 + 7.0 / 8 * s / 100e9;
  EXPECT_DOUBLE_EQ(net.all_gather({16, 2, 8}, s), inter_ag + intra_ag);
  EXPECT_DOUBLE_EQ(net.reduce_scatter({16, 2, 8}, s), inter_ag + intra_ag);
  EXPECT_DOUBLE_EQ(net.all_reduce({16, 2, 8}, s), intra_ag + 2 * inter_ag + intra_ag);
}

TEST(Collectives, GrowWithTheGroupAndCostMoreAcrossNodes) {
  CostModel cost = default_cost_model(deck("text_longtail"), 100.0, 8);
  for (auto algorithm : {CollectiveAlgorithm::ring, CollectiveAlgorithm::tree}) {
    cost.algorithm = algorithm;
    for (int n = 2; n < 64; ++n) {
      EXPECT_GE(all_gather_time(cost.intra_node, algorithm, n + 1, 1e6),
                all_gather_time(cost.intra_node, algorithm, n, 1e6));
      EXPECT_GE(all_reduce_time(cost.inter_node, algorithm, n + 1, 1e6),
                all_reduce_time(cost.inter_node, algorithm, n, 1e6));
    }
    for (int n = 1; n < 256; ++n) EXPECT_LE(cost.grad_sync(n), cost.grad_sync(n + 1)) << n;
    // Latency alone (a sample of no tokens): one step per rank of the ring, not one constant.
    EXPECT_LT(cost.llm_comm(0.0, 2, false), cost.llm_comm(0.0, 8, false));
    EXPECT_LT(cost.llm_comm(0.0, 16, true), cost.llm_comm(0.0, 64, true));
  }
  cost.algorithm = CollectiveAlgorithm::ring;
  // The ring (p2p): 7 steps forward, 7 backward and the last dK|dV hop, each one message's latency.
  EXPECT_DOUBLE_EQ(cost.llm_comm(0.0, 8, false), cost.cp_layers * 15 * cost.intra_node.latency);
  // Nothing hidden: a block each step forward, two backward, one more hop; all hidden: that hop alone.
  const double block = cost.kv_row_bytes * 800.0 / 8 / cost.intra_node.bandwidth;
  EXPECT_NEAR(cost.llm_comm(800.0, 8, false) - cost.llm_comm(0.0, 8, false), cost.cp_layers * 22 * block,
              1e-15);
  cost.cp_overlap = 1.0;
  EXPECT_NEAR(cost.llm_comm(800.0, 8, false) - cost.llm_comm(0.0, 8, false), cost.cp_layers * block, 1e-15);
  // a2a (8 heads per rank): four all-to-alls with 7 peers each, each member sending 7/8 of its 100 rows'
  // K|V row bytes; a group of 3 does not divide the heads and runs the ring.
  cost.cp_comm = CpComm::a2a;
  cost.cp_heads = 8;
  cost.cp_overlap = 0.0;
  EXPECT_DOUBLE_EQ(cost.llm_comm(0.0, 8, false), cost.cp_layers * 4 * 7 * cost.intra_node.latency);
  EXPECT_NEAR(cost.llm_comm(800.0, 8, false) - cost.llm_comm(0.0, 8, false),
              cost.cp_layers * 4 * cost.kv_row_bytes * 100.0 * 7 / 8 / cost.intra_node.bandwidth, 1e-15);
  const double ring_of_three = [&] {
    CostModel ring = cost;
    ring.cp_comm = CpComm::p2p;
    return ring.llm_comm(900.0, 3, false);
  }();
  EXPECT_DOUBLE_EQ(cost.llm_comm(900.0, 3, false), ring_of_three);
  // all_gather: an all-gather forward and a reduce-scatter backward, 7 steps each.
  cost.cp_comm = CpComm::all_gather;
  EXPECT_DOUBLE_EQ(cost.llm_comm(0.0, 8, false), cost.cp_layers * 2 * 7 * cost.intra_node.latency);
  // Recomputation repeats the forward's exchange: full in every mechanism (all_gather: one more
  // all-gather; a2a: two more all-to-alls; the ring: 7 more forward steps), selective the ring's and a2a's
  // output all-to-all (the all-gather keeps the group's K|V).
  const auto with = [&](CpComm mode, Recompute recompute) {
    CostModel c = cost;
    c.cp_comm = mode, c.cp_recompute = recompute;
    return c.llm_comm(0.0, 8, false);
  };
  const double step = cost.cp_layers * 7 * cost.intra_node.latency;
  EXPECT_DOUBLE_EQ(with(CpComm::all_gather, Recompute::full), 3 * step);
  EXPECT_DOUBLE_EQ(with(CpComm::all_gather, Recompute::selective), 2 * step);
  EXPECT_DOUBLE_EQ(with(CpComm::a2a, Recompute::full), 6 * step);
  EXPECT_DOUBLE_EQ(with(CpComm::a2a, Recompute::selective), 5 * step);
  EXPECT_DOUBLE_EQ(with(CpComm::p2p, Recompute::full), 3 * step + cost.cp_layers * cost.intra_node.latency);
  EXPECT_DOUBLE_EQ(with(CpComm::p2p, Recompute::selective), with(CpComm::p2p, Recompute::full));
  EXPECT_DOUBLE_EQ(with(CpComm::p2p, Recompute::none), 2 * step + cost.cp_layers * cost.intra_node.latency);
  // The same group size inside a node and across two: the node boundary costs more.
  EXPECT_LT(cost.llm_time(2000, 4, 0), cost.llm_time(2000, 4, 6));
  EXPECT_LT(cost.grad_sync(8), cost.grad_sync(9));
  const GroupSpan straddling = cost.span_of(6, 4);
  EXPECT_EQ(straddling.nodes, 2);
  EXPECT_EQ(straddling.per_node, 2);
  EXPECT_EQ(cost.span_of(0, 20).nodes, 3);
  EXPECT_EQ(cost.span_of(0, 20).per_node, 8);
}

// span_of in O(1) agrees with counting the range's ranks node by node, on random ranges and node sizes.
TEST(CostModel, SpanOfCountsEveryNodesRanks) {
  std::mt19937 random(7);
  CostModel cost;
  for (int trial = 0; trial < 2000; ++trial) {
    cost.ranks_per_node = 1 + static_cast<int>(random() % 9);
    const int first = static_cast<int>(random() % 64), g = 1 + static_cast<int>(random() % 64);
    std::map<int, int> on_node;
    for (int r = first; r < first + g; ++r) ++on_node[cost.node_of(r)];
    int most = 0;
    for (const auto& [node, ranks] : on_node) most = std::max(most, ranks);
    const GroupSpan span = cost.span_of(first, g);
    ASSERT_EQ(span.ranks, g);
    ASSERT_EQ(span.nodes, static_cast<int>(on_node.size())) << first << " + " << g;
    ASSERT_EQ(span.per_node, most) << first << " + " << g << " on nodes of " << cost.ranks_per_node;
  }
}

// ---------------------------------------------------------------------------------------------------
// The machine section and machine files

TEST(MachineSection, ReadsEveryKeyAndRejectsBadValues) {
  const RunConfig c = parse_run_config(R"(
name: m
machine:
  name: test
  ranks_per_node: 4
  nvlink_domain: 8
  memory_gib: 16
  peak_gflops: 1000
  intra_node: {bandwidth_gbs: 100, latency_us: 2}
  inter_node: {bandwidth_gbs: 10, latency_us: 5}
  collective_algorithm: tree
  comm_creation_ms: 1.5
)",
                                       "m.yaml");
  EXPECT_EQ(c.machine.ranks_per_node, 4);
  EXPECT_EQ(c.machine.nvlink_domain, 8);
  EXPECT_EQ(c.machine.memory_gib, 16.0);
  EXPECT_EQ(c.machine.inter_node.latency_us, 5.0);
  EXPECT_EQ(c.machine.collective_algorithm, "tree");
  EXPECT_EQ(c.machine.comm_creation_ms, 1.5);
  const auto error = [](const std::string& text) {
    try {
      parse_run_config("name: m\n" + text, "m.yaml");
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_EQ(
      error("machine: {memroy_gib: 8}"),
      "m.yaml: machine.memroy_gib = 8: unknown key (did you mean 'memory_gib'?); valid keys in machine: "
      "name, ranks_per_node, nvlink_domain, memory_gib, peak_gflops, intra_node, inter_node, "
      "collective_algorithm, comm_creation_ms, activation_precision, cp_overlap, gemm");
  EXPECT_EQ(error("machine: {comm_creation_ms: 0}"),
            "m.yaml: machine.comm_creation_ms = 0: must be a number > 0");
  EXPECT_EQ(error("machine: {memory_gib: 0}"), "m.yaml: machine.memory_gib = 0: must be a number > 0");
  EXPECT_EQ(error("machine: {intra_node: {bandwidth_gbs: 10}}"),
            "m.yaml: machine.intra_node.latency_us = (missing): required key in machine.intra_node");
  EXPECT_EQ(error("machine: {collective_algorithm: star}"),
            "m.yaml: machine.collective_algorithm = star: must be one of ring, tree");
  EXPECT_EQ(
      error("machine: {ranks_per_node: 4, nvlink_domain: 6}"),
      "m.yaml: machine.nvlink_domain = 6: must be a multiple of machine.ranks_per_node (= 4): an NVLink "
      "domain holds whole nodes");
  // The older names are the same values: both given, they must agree.
  EXPECT_EQ(error("machine: {peak_gflops: 5}\nruntime: {peak_gflops_per_rank: 6}"),
            "m.yaml: runtime.peak_gflops_per_rank = 6: is also given as machine.peak_gflops = 5; give one "
            "(they are the same value)");
  EXPECT_EQ(parse_run_config("name: m\nparallel: {ranks_per_node: 3}", "m.yaml").machine.ranks_per_node, 3);
}

TEST(MachineSection, PresetsAndCalibrationFilesAreMachineFiles) {
  const MachineConfig h100 = load_machine_file((kInputs / "machines" / "dgx-h100.yaml").string());
  EXPECT_EQ(h100.ranks_per_node, 8);
  EXPECT_EQ(h100.inter_node.bandwidth_gbs, 50.0);
  const MachineConfig cpu = load_machine_file((kInputs / "machines" / "cpu-cluster.yaml").string());
  EXPECT_GT(cpu.memory_gib, 0.0);
  // machine_to_yaml round-trips.
  EXPECT_EQ(machine_to_yaml(parse_machine_text(machine_to_yaml(h100), "back.yaml")), machine_to_yaml(h100));
  // A file with no machine section, or with other keys beside it (not a calibration), is refused.
  EXPECT_THROW(parse_machine_text("ranks_per_node: 8\n", "flat.yaml"), InputError);
  EXPECT_THROW(parse_machine_text("machine: {ranks_per_node: 8}\nextra: 1\n", "extra.yaml"), InputError);
  // A calibration's machine section is read by both readers.
  Calibration c;
  c.encoder.cost = c.llm.cost = {0.0, 1e-6, 1e-5};
  c.machine.ranks_per_node = 2;
  c.machine.intra_node = {9.5, 1.25};
  c.machine_notes = {"measured: ranks_per_node, intra_node", "not measured: inter_node (one node)"};
  const std::string text = calibration_to_yaml(c);
  EXPECT_NE(text.find("# not measured: inter_node (one node)"), std::string::npos);
  EXPECT_EQ(parse_calibration(text, "cal.yaml").machine.intra_node.bandwidth_gbs, 9.5);
  EXPECT_EQ(parse_calibration(text, "cal.yaml").machine.comm_creation_ms, 0.0);  // not measured: not written
  c.machine.comm_creation_ms = 0.125;
  EXPECT_EQ(parse_calibration(calibration_to_yaml(c), "cal.yaml").machine.comm_creation_ms, 0.125);
  EXPECT_EQ(parse_machine_text(text, "cal.yaml").ranks_per_node, 2);
}

TEST(MachineSection, AppliesItsLinksAlgorithmAndDomain) {
  CostModel cost = default_cost_model(deck("quickstart"), 100.0, 4);
  MachineConfig m;
  m.ranks_per_node = 4, m.nvlink_domain = 16;
  m.intra_node = {450.0, 1.0};
  m.collective_algorithm = "tree";
  apply_machine(cost, m);
  EXPECT_EQ(cost.ranks_per_node, 16);  // the links' "node" is the NVLink domain
  EXPECT_DOUBLE_EQ(cost.intra_node.bandwidth, 450e9);
  EXPECT_DOUBLE_EQ(cost.step.allreduce_intra.latency, 1e-6);
  EXPECT_DOUBLE_EQ(cost.inter_node.bandwidth, 1e9);  // not given: nominal
  EXPECT_EQ(cost.algorithm, CollectiveAlgorithm::tree);
  const double assumed = StepCost{}.comm_creation;  // not given: the default
  EXPECT_EQ(cost.step.comm_creation, assumed);
  m.comm_creation_ms = 40.0;
  apply_machine(cost, m);
  EXPECT_DOUBLE_EQ(cost.step.comm_creation, 0.04);
}

// ---------------------------------------------------------------------------------------------------
// Memory

TEST(Memory, ModelMatchesTheModelsOwnAccounting) {
  for (const char* name : {"quickstart", "llm_heavy", "modality_incoherent"})
    for (GemmPrecision precision : {GemmPrecision::fp32, GemmPrecision::bf16})
      for (Recompute recompute : {Recompute::none, Recompute::selective, Recompute::full}) {
        SCOPED_TRACE(std::string(name) + (precision == GemmPrecision::bf16 ? " bf16" : " fp32") +
                     " recompute " + to_string(recompute));
        const ModelConfig model = deck(name).model;
        const MemoryModel m = memory_model(model, precision, recompute);
        EXPECT_DOUBLE_EQ(m.state, 16.0 * parameter_count(model));
        for (std::int64_t rows : {1, 100, 5000})
          for (std::int64_t patches : {0, 64, 4000})
            for (std::int64_t keys : {std::int64_t(0), 3 * rows}) {
              const double exact = activation_bytes(model, precision, recompute, rows, patches, keys);
              const double modelled =
                  m.fixed + m.per_row * rows + m.per_encoder_row.at(0) * patches + m.per_key_row * keys;
              EXPECT_GE(modelled, exact * (1 - 1e-12));  // an upper bound ...
              // Exact where the accounting is linear: fp32, no context parallelism, and at most one chunk
              // of LM-head logits (beyond it the model counts logits per row, the step keeps one chunk).
              if (precision == GemmPrecision::fp32 && keys == 0 &&
                  rows <= lm_head_chunk_rows(model.llm.vocab)) {
                EXPECT_NEAR(modelled, exact, 1e-9 * exact);
              }
              // ... and a close one. Under full recomputation the blocks keep far fewer bytes per row while
              // the model's over-count (bf16 operands and LM-head logits per row) stays: 1.29 at worst here.
              EXPECT_LE(modelled, (recompute == Recompute::full ? 1.3 : 1.25) * exact);
            }
      }
}

TEST(Memory, CapacityInvertsTheMicroBatchBytes) {
  CostModel cost = default_cost_model(deck("text_longtail"), 100.0, 8);
  cost.memory = memory_model(deck("text_longtail").model, GemmPrecision::fp32);
  EXPECT_TRUE(std::isinf(cost.token_capacity(1)));
  cost.capacity_bytes = cost.memory.state + cost.memory.fixed + 3000 * cost.memory.per_row;
  const double free_bytes = 3000 * cost.memory.per_row;
  EXPECT_NEAR(cost.token_capacity(1), 3000.0, 1e-9);
  for (int g : {2, 3, 8, 64, 1000}) {
    const double t = cost.token_capacity(g);
    EXPECT_NEAR(cost.micro_batch_bytes(t, g), free_bytes, 1e-6 * free_bytes) << g;
    EXPECT_GT(cost.micro_batch_bytes(t * 1.001, g), free_bytes) << g;
    EXPECT_GT(t, cost.token_capacity(g - 1) * (g == 2 ? 1.0 : 0.999)) << g;  // more ranks hold more
  }
  // The fullest member's rows bound every member's rows of the executor's chunks, and exceed them by
  // at most two rows.
  for (int tokens : {1, 7, 100, 2048, 30000})
    for (int g : {2, 3, 8, 32}) {
      int most = 0;
      for (int r = 0; r < g; ++r) {
        int rows = 0;
        for (const RowRange& c : load_balanced_chunks(tokens, g, r)) rows += c.end - c.begin;
        EXPECT_LE(rows, cost.chunk_rows(tokens, g)) << tokens;
        most = std::max(most, rows);
      }
      EXPECT_LE(cost.chunk_rows(tokens, g), most + 2.0) << tokens << " on " << g;
    }
  // The encoder's reserve comes off the top.
  cost.encoder_reserve_bytes = 1000 * cost.memory.per_row;
  EXPECT_NEAR(cost.token_capacity(1), 2000.0, 1e-9);
}

// A deck of text samples of given lengths, and the cost model with a capacity of `tokens_per_rank` tokens on
// one rank.
GlobalBatch lengths(const std::vector<int>& text) {
  GlobalBatch batch;
  for (size_t i = 0; i < text.size(); ++i) {
    SampleMeta s;
    s.id = static_cast<int>(i), s.text_len = text[i];
    batch.samples.push_back(s);
  }
  return batch;
}

CostModel bounded(const RunConfig& config, double tokens_per_rank, int ranks_per_node = 8,
                  CpComm cp_comm = CpComm::p2p) {
  CostModel cost = default_cost_model(config, 100.0, ranks_per_node);
  cost.memory = memory_model(config.model, GemmPrecision::fp32, Recompute::none, 1, cp_comm);
  cost.capacity_bytes = cost.memory.state + cost.memory.fixed + tokens_per_rank * cost.memory.per_row;
  cost.capacity_source = "test";
  return cost;
}

double peak(const StepPlan& plan, const GlobalBatch& batch, const CostModel& cost, int world) {
  const std::vector<double> bytes = rank_peak_bytes(plan, batch, cost, world);
  return *std::max_element(bytes.begin(), bytes.end());
}

// The encoder per micro-batch (MemoryModel::encoder_per_stage): a rank holds its largest stage's items,
// not the step's, by hand on a random batch with groups of different micro-batch counts.
TEST(Memory, EncoderPerMicroBatchHoldsOneStagesItems) {
  const RunConfig config = deck("many_images");
  const GlobalBatch batch = Sampler(config).batch(0);
  CostModel cost = bounded(config, 1e9);
  StepPlan plan = make_grouped_plan(batch, {2, 1, 1});
  for (size_t g = 0; g < plan.llm_groups.size(); ++g)
    plan.llm_groups[g].micro_batches =
        std::min<int>(3 - static_cast<int>(g), plan.llm_groups[g].samples.size());
  const std::vector<double> whole = rank_peak_bytes(plan, batch, cost, 4);
  cost.memory.encoder_per_stage = true;
  const std::vector<double> staged = rank_peak_bytes(plan, batch, cost, 4);
  const std::vector<int> stage = item_stages(plan, first_item_of_samples(batch));
  std::map<std::pair<int, int>, double> held;  // (rank, stage) -> bytes
  int item = 0;
  for (const SampleMeta& sample : batch.samples)
    for (const EncoderItem& im : sample.items) {
      held[{plan.item_owner[item], stage[item]}] += cost.memory.item_bytes(im);
      ++item;
    }
  bool smaller = false;
  for (int r = 0; r < 4; ++r) {
    double largest = 0.0, all = 0.0;
    for (const auto& [key, bytes] : held)
      if (key.first == r) largest = std::max(largest, bytes), all += bytes;
    EXPECT_NEAR(whole[r] - staged[r], all - largest, 1e-6 * whole[r]) << "rank " << r;
    smaller |= staged[r] < whole[r];
  }
  EXPECT_TRUE(smaller) << "no rank held items of two stages: the check would be vacuous";
}

TEST(Memory, FitsOrNot) {
  const RunConfig config = deck("text_longtail");
  const CostModel cost = bounded(config, 1000.0, 8, CpComm::all_gather);
  EXPECT_NO_THROW(require_batch_fits(lengths({900, 500, 20}), cost, 1));
  // All-gathered, every member holds the whole sequence's K|V of every layer: a sample just beyond what 16
  // ranks hold fits 64; the ring holds K|V blocks of a member's rows, never the sequence's: it fits 16.
  const int beyond_16 = static_cast<int>(cost.token_capacity(16)) + 1;
  EXPECT_NO_THROW(require_batch_fits(lengths({beyond_16, 20}), cost, 64));
  EXPECT_NO_THROW(require_batch_fits(lengths({20, beyond_16}), bounded(config, 1000.0), 16));
  try {
    require_batch_fits(lengths({20, beyond_16}), cost, 16);
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("sample 1 of step 0 has " + std::to_string(beyond_16) + " tokens"), std::string::npos)
        << what;
    EXPECT_NE(what.find("MiB per rank (test)"), std::string::npos) << what;
  }
  // The model state alone over the capacity.
  CostModel tiny = cost;
  tiny.capacity_bytes = cost.memory.state / 2;
  EXPECT_THROW(require_batch_fits(lengths({10}), tiny, 8), InputError);
  // Unbounded: nothing to check.
  CostModel free = cost;
  free.capacity_bytes = 0.0;
  EXPECT_NO_THROW(require_batch_fits(lengths({1 << 20}), free, 1));
}

// A sample longer than one rank holds forces a context-parallel group big enough for it; the policies
// that keep one rank per sample (or a fixed degree of 1) cannot fit and say so.
// Under a2a each group is charged the mechanism it runs: with 4 heads a group of 2 shards them (the head
// shard of the group's rows per layer), a group of 3 runs the ring (its blocks in flight, as under p2p).
TEST(Memory, A2aChargesEachGroupTheMechanismItRuns) {
  const RunConfig config = deck("text_longtail");
  CostModel cost = bounded(config, 1000.0, 8, CpComm::a2a);
  cost.cp_comm = CpComm::a2a;
  cost.cp_heads = 4;
  EXPECT_EQ(cost.key_row_bytes(2), cost.memory.per_key_row);
  EXPECT_EQ(cost.key_row_bytes(3), cost.memory.per_key_row_ring);
  EXPECT_DOUBLE_EQ(cost.memory.per_key_row_ring, bounded(config, 1000.0, 8, CpComm::p2p).memory.per_key_row);
  EXPECT_LT(cost.memory.per_key_row_ring, cost.memory.per_key_row);
  // The ring's lighter key rows let a group of 3 hold more than if it were charged a2a's.
  CostModel all_shard = cost;
  all_shard.cp_heads = 12;
  EXPECT_GT(cost.token_capacity(3), all_shard.token_capacity(3));
  EXPECT_EQ(cost.token_capacity(2), all_shard.token_capacity(2));
}

TEST(Memory, LongSampleForcesAContextParallelGroup) {
  const RunConfig config = deck("text_longtail");
  const CostModel cost = bounded(config, 1500.0);
  std::vector<int> text(64, 50);
  text[5] = 3000;
  const GlobalBatch batch = lengths(text);
  int needed = 1;
  while (cost.token_capacity(needed) < 3000) ++needed;
  ASSERT_GT(needed, 2);
  for (const char* name : {"dhp", "flexsp", "megatron_dcp"}) {
    SCOPED_TRACE(name);
    const StepPlan plan = make_planner(name, cost, {})->plan(batch, 16);
    ASSERT_NO_THROW(validate_plan(plan, batch, 16));
    for (const LlmGroup& g : plan.llm_groups)
      if (std::count(g.samples.begin(), g.samples.end(), 5)) {
        EXPECT_GE(static_cast<int>(g.ranks.size()), needed);
      }
    EXPECT_LE(peak(plan, batch, cost, 16), cost.capacity_bytes);
  }
  for (const char* name : {"static", "naive", "orch", "disagg"})
    EXPECT_THROW(make_planner(name, cost, {})->plan(batch, 16), DoesNotFit) << name;
  PlannerOptions cp8;
  cp8.cp = 8;
  ASSERT_GE(8, needed);
  const StepPlan plan = make_planner("static", cost, cp8)->plan(batch, 16);
  EXPECT_LE(peak(plan, batch, cost, 16), cost.capacity_bytes);
}

// disagg's encoder ranks hold every item of the step they encode (their activations wait for the
// backward): where the count that balances the time leaves them too little memory, it takes as many as
// their items need, and fits; on random batches of two image decks.
TEST(Memory, DisaggSizesItsEncoderRanksByMemory) {
  std::mt19937 random(5);
  for (const char* name : {"modality_incoherent", "quickstart"}) {
    for (int trial = 0; trial < 3; ++trial) {
      SCOPED_TRACE(std::string(name) + " trial " + std::to_string(trial));
      RunConfig config = deck(name);
      config.seed = random();
      config.data.global_batch = 96;
      const int world = 16;
      const GlobalBatch batch = Sampler(config).batch(trial);
      int longest = 0;
      double items = 0.0, largest = 0.0;
      CostModel cost = bounded(config, 1.0, 4);
      for (const SampleMeta& s : batch.samples) {
        longest = std::max(longest, s.tokens());
        for (const EncoderItem& item : s.items) {
          items += cost.memory.item_bytes(item);
          largest = std::max(largest, cost.memory.item_bytes(item));
        }
      }
      ASSERT_GT(items, 0.0);
      // Room for the longest sample's rows twice over, and for an eighth of the items beside the largest.
      cost = bounded(config, 2.0 * longest, 4);
      cost.capacity_bytes =
          std::max(cost.capacity_bytes, cost.memory.state + cost.memory.fixed + largest + items / 8);
      const double room = cost.capacity_bytes - cost.memory.state - cost.memory.fixed - largest;
      const int needed = static_cast<int>(std::ceil(items / room));
      CostModel unlimited = cost;
      unlimited.capacity_bytes = 0.0;
      const StepPlan by_time = make_planner("disagg", unlimited, {})->plan(batch, world);
      const StepPlan plan = make_planner("disagg", cost, {})->plan(batch, world);
      ASSERT_NO_THROW(validate_plan(plan, batch, world));
      EXPECT_GE(static_cast<int>(plan.encoder_ranks.size()), std::min(needed, world - 1));
      EXPECT_GE(plan.encoder_ranks.size(), by_time.encoder_ranks.size());
      EXPECT_LE(peak(plan, batch, cost, world), cost.capacity_bytes * (1 + 1e-12));
    }
  }
}

// Every planner's plan fits, or the planner says it cannot (only the policies without context
// parallelism may), on every deck, random batches and world sizes, with a capacity that binds.
TEST(Memory, EveryPlannerStaysUnderTheCapacity) {
  std::mt19937 random(12);
  for (const char* name : {"quickstart", "text_longtail", "modality_incoherent", "llm_heavy"}) {
    RunConfig config = deck(name);
    for (int world : {4, 8, 64}) {
      config.seed = random();
      config.data.global_batch = world * (2 + random() % 6);
      const GlobalBatch batch = Sampler(config).batch(static_cast<int>(random() % 5));
      int longest = 0;
      for (const SampleMeta& s : batch.samples) longest = std::max(longest, s.tokens());
      // One rank holds 0.6 to 1.5 times the longest sample, and twice its share of the step's images (the
      // encoder's activations are held for the whole step) with the largest image.
      CostModel cost = bounded(config, longest * (0.6 + 0.9 * (random() % 100) / 100.0), 4);
      double patches = 0.0, largest = 0.0;
      for (const SampleMeta& s : batch.samples)
        for (const EncoderItem& im : s.items)
          patches += im.rows, largest = std::max<double>(largest, im.rows);
      cost.capacity_bytes += 2.0 * cost.memory.per_encoder_row.at(0) * (patches / world + largest);
      bool fits_somewhere = true;
      try {
        require_batch_fits(batch, cost, world);
      } catch (const InputError&) {
        fits_somewhere = false;
      }
      for (const std::string& policy : planner_names()) {
        SCOPED_TRACE(std::string(name) + " " + policy + " on " + std::to_string(world));
        const bool context_parallel = policy == "dhp" || policy == "flexsp" || policy == "megatron_dcp";
        try {
          const StepPlan plan = make_planner(policy, cost, {})->plan(batch, world);
          ASSERT_TRUE(fits_somewhere);
          ASSERT_NO_THROW(validate_plan(plan, batch, world));
          EXPECT_LE(peak(plan, batch, cost, world), cost.capacity_bytes * (1 + 1e-12));
        } catch (const DoesNotFit& e) {
          EXPECT_FALSE(context_parallel && fits_somewhere) << e.what();
        } catch (const InputError& e) {
          EXPECT_FALSE(fits_somewhere && context_parallel) << e.what();
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------------
// The simulator: fits and peak bytes per rank, and the machine's precedence.

TEST(SimulatorMemory, ReportsFitsAndPeakBytes) {
  RunConfig config = parse_run_config(R"(
name: long
steps: 2
model:
  llm: {width: 128, heads: 4, layers: 2, vocab: 256}
data:
  global_batch: 64
  text: {median: 64, sigma: 1.2, min: 8, max: 4096}
  images: {mean_per_sample: 0, max_per_sample: 0}
machine: {ranks_per_node: 8, peak_gflops: 100}
)",
                                      "long.yaml");
  const MemoryModel m = memory_model(config.model, GemmPrecision::fp32);
  int longest = 0;
  for (int step = 0; step < config.steps; ++step)
    for (const SampleMeta& s : Sampler(config).batch(step).samples) longest = std::max(longest, s.tokens());
  SimulateOptions options;
  options.ranks = 32;
  options.policies = planner_names();
  // One rank holds 70% of the longest sample.
  options.memory_gib = (m.state + m.fixed + 0.7 * longest * m.per_row) / (1024.0 * 1024.0 * 1024.0);
  options.out_path = "/tmp/minimllm-test-machine-" + std::to_string(getpid()) + ".h5";
  options.overwrite = true;
  const std::vector<PolicySummary> result = simulate(config, options);
  for (const PolicySummary& s : result) {
    SCOPED_TRACE(s.policy);
    EXPECT_GT(s.peak_bytes_per_rank, m.state);
    if (s.policy == "disagg") {
      EXPECT_FALSE(s.fits);  // one rank per sample: the longest does not fit
      EXPECT_NE(s.does_not_fit.find("would hold"), std::string::npos) << s.does_not_fit;
    }
    if (s.policy == "dhp" || s.policy == "flexsp" || s.policy == "megatron_dcp" || s.policy == "static") {
      EXPECT_TRUE(s.fits) << s.does_not_fit;
      EXPECT_LE(s.peak_bytes_per_rank, options.memory_gib * 1024.0 * 1024.0 * 1024.0);
    }
  }
  EXPECT_GT(result[0].cp, 1);  // static's best degree holds the longest sample
  const std::string table = "/simulation/disagg";
  const std::vector<double> peak =
      testing_support::read_record_field(options.out_path, table, "peak_bytes_per_rank");
  const std::vector<double> fits = testing_support::read_record_field(options.out_path, table, "fits");
  ASSERT_EQ(peak.size(), 2u);  // one record per step
  ASSERT_EQ(fits.size(), 2u);
  const PolicySummary& disagg =
      *std::find_if(result.begin(), result.end(), [](auto& s) { return s.policy == "disagg"; });
  EXPECT_EQ(*std::max_element(peak.begin(), peak.end()), disagg.peak_bytes_per_rank);
  EXPECT_EQ(*std::min_element(fits.begin(), fits.end()), 0.0);
  unlink(options.out_path.c_str());
}

using testing_support::read_number_attribute;
using testing_support::read_string_attribute;

// Command line > machine file (replacing the deck's section) > the deck's section > defaults, each value
// recorded in /run with where it came from.
TEST(SimulatorMachine, PrecedenceIsRecorded) {
  RunConfig config = parse_run_config(embedded_quickstart_deck(), "quickstart");
  config.steps = 1;
  config.machine.ranks_per_node = 4, config.machine.peak_gflops = 50.0, config.machine.memory_gib = 2.0;
  SimulateOptions options;
  options.ranks = 16;
  options.policies = {"static"};
  options.ranks_per_node = 8;  // --ranks-per-node
  options.out_path = "/tmp/minimllm-test-precedence-" + std::to_string(getpid()) + ".h5";
  options.overwrite = true;
  const auto run_attributes = [&](const std::function<void(hid_t)>& check) {
    simulate(config, options);
    hid_t file = H5Fopen(options.out_path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t run = H5Gopen2(file, "/run", H5P_DEFAULT);
    check(run);
    H5Gclose(run), H5Fclose(file);
  };
  run_attributes([](hid_t run) {
    EXPECT_EQ(read_number_attribute(run, "machine_ranks_per_node"), 8.0);
    EXPECT_EQ(read_string_attribute(run, "machine_ranks_per_node_source"), "--ranks-per-node");
    EXPECT_EQ(read_number_attribute(run, "machine_peak_gflops"), 50.0);
    EXPECT_EQ(read_string_attribute(run, "machine_peak_source"), "machine section");
    EXPECT_EQ(read_number_attribute(run, "machine_memory_gib"), 2.0);
    EXPECT_EQ(read_string_attribute(run, "machine_intra_node_source"), "nominal default");
    EXPECT_EQ(read_string_attribute(run, "machine_section"), "quickstart");
  });
  // A machine file replaces the deck's section as a whole: its memory, not the deck's.
  const std::string machine = "/tmp/minimllm-test-machine-" + std::to_string(getpid()) + ".yaml";
  {
    std::ofstream out(machine);
    out << "machine: {memory_gib: 3, peak_gflops: 70, inter_node: {bandwidth_gbs: 25, latency_us: 3}}\n";
  }
  options.machine_file = machine;
  options.memory_gib = 1.5;  // --memory-gib
  run_attributes([&](hid_t run) {
    EXPECT_EQ(read_string_attribute(run, "machine_section"), machine);
    EXPECT_EQ(read_number_attribute(run, "machine_peak_gflops"), 70.0);
    EXPECT_EQ(read_number_attribute(run, "machine_memory_gib"), 1.5);
    EXPECT_EQ(read_string_attribute(run, "machine_memory_source"), "--memory-gib");
    EXPECT_EQ(read_number_attribute(run, "machine_inter_node_bandwidth_gbs"), 25.0);
    EXPECT_EQ(read_string_attribute(run, "machine_inter_node_source"), "machine section");
  });
  unlink(machine.c_str());
  unlink(options.out_path.c_str());
}

}  // namespace
}  // namespace minimllm

namespace minimllm {
namespace {

void expect_same_phase(const PhaseCost& a, const PhaseCost& b, const char* what) {
  EXPECT_EQ(a.a2, b.a2) << what;
  EXPECT_EQ(a.a1, b.a1) << what;
  EXPECT_EQ(a.c, b.c) << what;
}

void expect_same_link(const LinkCost& a, const LinkCost& b, const char* what) {
  EXPECT_EQ(a.latency, b.latency) << what;
  EXPECT_EQ(a.bandwidth, b.bandwidth) << what;
}

// Every field of the cost model (planning/cost_model.hpp), compared exactly.
void expect_same_cost_model(const CostModel& a, const CostModel& b) {
  ASSERT_EQ(a.encoders.size(), b.encoders.size());
  for (size_t m = 0; m < a.encoders.size(); ++m) {
    expect_same_phase(a.encoders[m].compute, b.encoders[m].compute, "encoder");
    EXPECT_EQ(a.encoders[m].input_bytes_per_row, b.encoders[m].input_bytes_per_row);
    EXPECT_EQ(a.encoders[m].data_per_item, b.encoders[m].data_per_item);
    EXPECT_EQ(a.encoders[m].data_per_row, b.encoders[m].data_per_row);
  }
  expect_same_phase(a.llm, b.llm, "llm");
  expect_same_link(a.intra_node, b.intra_node, "intra_node");
  expect_same_link(a.inter_node, b.inter_node, "inter_node");
  EXPECT_EQ(a.algorithm, b.algorithm);
  EXPECT_EQ(a.ranks_per_node, b.ranks_per_node);
  EXPECT_EQ(a.kv_row_bytes, b.kv_row_bytes);
  EXPECT_EQ(a.cp_layers, b.cp_layers);
  EXPECT_EQ(a.cp_recompute, b.cp_recompute);
  EXPECT_EQ(a.boundary_bytes_per_row, b.boundary_bytes_per_row);
  EXPECT_EQ(a.input_bytes_per_token, b.input_bytes_per_token);
  EXPECT_EQ(a.memory.state, b.memory.state);
  EXPECT_EQ(a.memory.fixed, b.memory.fixed);
  EXPECT_EQ(a.memory.per_row, b.memory.per_row);
  EXPECT_EQ(a.memory.per_key_row, b.memory.per_key_row);
  EXPECT_EQ(a.memory.per_encoder_row, b.memory.per_encoder_row);
  EXPECT_EQ(a.memory.encoder_apart, b.memory.encoder_apart);
  EXPECT_EQ(a.capacity_bytes, b.capacity_bytes);
  EXPECT_EQ(a.encoder_reserve_bytes, b.encoder_reserve_bytes);
  EXPECT_EQ(a.step.data_c, b.step.data_c);
  EXPECT_EQ(a.step.data_per_token, b.step.data_per_token);
  EXPECT_EQ(a.step.optimizer, b.step.optimizer);
  EXPECT_EQ(a.step.grad_bytes, b.step.grad_bytes);
  expect_same_link(a.step.allreduce_intra, b.step.allreduce_intra, "allreduce_intra");
  expect_same_link(a.step.allreduce_inter, b.step.allreduce_inter, "allreduce_inter");
  expect_same_link(a.step.point_to_point_intra, b.step.point_to_point_intra, "point_to_point_intra");
  expect_same_link(a.step.point_to_point_inter, b.step.point_to_point_inter, "point_to_point_inter");
  EXPECT_EQ(a.step.tensor_parallel_ranks, b.step.tensor_parallel_ranks);
  expect_same_link(a.step.tensor_parallel_allreduce, b.step.tensor_parallel_allreduce, "tp all-reduce");
  EXPECT_EQ(a.step.comm_creation, b.step.comm_creation);
  EXPECT_EQ(a.step.encoder_forward_share, b.step.encoder_forward_share);
  EXPECT_EQ(a.pipeline_stages, b.pipeline_stages);
}

// A run and a simulation of the same deck on the same machine plan with the same cost model and machine
// (driver/resolve_cost_model.hpp): a prediction cannot drift from the run it predicts.
TEST(ResolveCostModel, RunAndSimulateBuildTheSameModel) {
  for (const bool distributed_optimizer : {false, true}) {
    SCOPED_TRACE(testing::Message() << "distributed_optimizer " << distributed_optimizer);
    RunConfig config = parse_run_config(embedded_quickstart_deck(), "quickstart");
    config.steps = 2;
    config.runtime.gemm = "blas";  // no start-up timing of the GEMM backends
    config.parallel.distributed_optimizer = distributed_optimizer;
    config.machine = parse_machine_text(
        "machine:\n  ranks_per_node: 1\n  memory_gib: 6\n  peak_gflops: 40\n"
        "  intra_node: {bandwidth_gbs: 20, latency_us: 2}\n  inter_node: {bandwidth_gbs: 5, latency_us: 9}\n"
        "  comm_creation_ms: 3\n" +
            std::string(distributed_optimizer ? "  gemm: {efficiency: 0.5, memory_gbs: 10, launch_us: 20, "
                                                "tile: [16, 16, 16], units: 2}\n"
                                              : ""),
        "machine.yaml");
    TrainResult result;
    const RunSetup run(config, World::of(MPI_COMM_SELF), {}, result);
    SimulateOptions options;
    options.ranks = 1;
    const SimulationCostModel simulated = simulation_cost_model(config, options);
    expect_same_cost_model(run.cost.model, simulated.choice.model);
    EXPECT_EQ(run.cost.source, simulated.choice.source);
    EXPECT_EQ(machine_to_yaml(result.machine.machine), machine_to_yaml(simulated.machine.machine));
    EXPECT_EQ(result.machine.gemm_shapes, simulated.machine.gemm_shapes);
    EXPECT_EQ(result.machine.gemm_shapes.empty(), !distributed_optimizer) << result.machine.gemm_shapes;
  }
}

}  // namespace
}  // namespace minimllm
