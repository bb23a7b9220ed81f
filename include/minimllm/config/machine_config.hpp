// MachineConfig: the machine a run or a simulation is for (a deck's `machine:` section, `simulate --machine
// FILE`, or the `machine:` section a calibration writes): ranks per node, per-rank memory and peak, and the
// links within a node (or NVLink domain) and between nodes. Every field is optional; 0 (or empty) means
// "not given", and the driver fills it from the command line, detection or measurement, or a default
// (docs/INPUT.md, "machine"; the precedence is command line > machine section > detected/measured >
// defaults).
#pragma once

#include <string>
#include <vector>

namespace minimllm {

namespace strict_yaml {
class Section;
}

// One link class: bandwidth per rank in one direction (GB/s, 1e9 bytes/s) and the latency of one message
// step of a collective (microseconds).
struct LinkSpec {
  double bandwidth_gbs = 0.0;  // 0: not given
  double latency_us = 0.0;     // 0 with bandwidth_gbs 0: not given (0 alone is a valid latency)
  bool given() const { return bandwidth_gbs > 0.0; }
};

// machine.gemm: how a GEMM's rate depends on its shape (C[m x n] += A[m x k] B[k x n] on one rank), a
// roofline over the work of a tiled, stream-K kernel (planning/gemm_rates.hpp):
//   time   = launch + max(compute, bytes / memory bandwidth)
//   blocks = ceil(m / tile_m) ceil(n / tile_n) ceil(k / tile_k)      whole tiles' k-blocks
//   compute = ceil(blocks / units) x units x 2 tile_m tile_n tile_k / (efficiency x peak)
//   bytes  = bytes_per_element (m k + k n + m n)
// Not given: every GEMM runs at the peak whatever its shape.
struct GemmSpec {
  double efficiency =
      0.0;  // machine.gemm.efficiency in [0.01, 1]: what a GEMM that fills the machine reaches
  double memory_gbs = 0.0;  // machine.gemm.memory_gbs: memory bandwidth per rank (GB/s)
  double launch_us = 0.0;   // machine.gemm.launch_us: a call's fixed cost (launch, tail)
  // machine.gemm.tile: [m, n, k], the output tile a unit computes and the k-block it computes at a time.
  int tile_m = 1, tile_n = 1, tile_k = 1;
  int units = 1;              // machine.gemm.units: k-blocks computed at once (SMs, cores)
  int bytes_per_element = 2;  // machine.gemm.bytes_per_element: operands' size (2: bf16)
  bool given() const { return efficiency > 0.0; }
};

struct MachineConfig {
  std::string name;          // machine.name: free text (e.g. "DGX H100 cluster"); empty: none
  int ranks_per_node = 0;    // machine.ranks_per_node; 0: detected (run) or 8 (simulate)
  int nvlink_domain = 0;     // machine.nvlink_domain: ranks sharing the intra-node link; 0 = ranks_per_node
  double memory_gib = 0.0;   // machine.memory_gib: memory per rank (GiB); 0: detected
  double peak_gflops = 0.0;  // machine.peak_gflops: dense peak per rank at runtime.precision; 0: detected
  LinkSpec intra_node;       // machine.intra_node: within a node (NVLink domain); not given: nominal
  LinkSpec inter_node;       // machine.inter_node: between nodes; not given: nominal
  // machine.collective_algorithm: ring (latency n - 1 steps) or tree (ceil(log2 n) steps); empty: ring.
  std::string collective_algorithm;
  // machine.comm_creation_ms: creating one communicator (MPI_Comm_create_group or ncclCommInitRank) on
  // its members; 0: the calibration's measurement, else the default (docs/INPUT.md, "machine").
  double comm_creation_ms = 0.0;
  // machine.activation_precision: what activations, K|V and their gradients travel in on this machine's
  // training (bf16 on GPUs); empty: fp32, as minimllm computes and moves them on CPUs.
  std::string activation_precision;
  // machine.cp_overlap: the share of a context-parallel ring's transfers hidden behind the attention of
  // the block before (1: all; parallel.cp_comm p2p); < 0: not given (then 0: nothing hidden).
  double cp_overlap = -1.0;
  GemmSpec gemm;  // machine.gemm (above)

  bool empty() const;
};

// The keys of a machine section, in documentation order.
const std::vector<std::string>& machine_keys();

// Reads a `machine:` section (absent or empty: all defaults) with the strict reader: unknown keys, wrong
// types and values out of range throw InputError naming the file, key, value and what is valid.
MachineConfig read_machine(const strict_yaml::Section& section);

// A machine file (`simulate --machine FILE`): a YAML map whose `machine:` key holds the section; a
// calibration file (it has `format:`) is read for its `machine:` section only, its other keys as the
// calibration reader checks them. Throws InputError.
MachineConfig parse_machine_text(const std::string& yaml_text, const std::string& origin);
MachineConfig load_machine_file(const std::string& path);

// The section as YAML: `machine:` and the keys given, one per line (round-trips through
// parse_machine_text).
std::string machine_to_yaml(const MachineConfig& machine);

}  // namespace minimllm
