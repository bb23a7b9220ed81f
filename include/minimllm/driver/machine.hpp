// The machine a run or a simulation uses, resolved field by field with where each value came from, in one
// order of precedence: command line (simulate --ranks-per-node, --gflops, --memory-gib) > machine section
// (simulate --machine FILE, else the deck's `machine:`) > detected or measured on this machine > defaults.
// Links: the machine section > a calibration's measurement > the nominal defaults. Recorded in /run
// (machine_* attributes) and printed in the banner and the simulate header.
#pragma once

#include <string>
#include <vector>

#include "minimllm/config/machine_config.hpp"
#include "minimllm/metrics/hdf5_writer.hpp"  // RunAttribute
#include "minimllm/planning/cost_model.hpp"

namespace minimllm {

struct ResolvedMachine {
  MachineConfig machine;  // every numeric field set; the links as the cost model uses them
  std::string section;    // where the machine section came from: a deck or machine file, or "none"
  std::string ranks_per_node_source, nvlink_domain_source, memory_source, peak_source, intra_node_source,
      inter_node_source, algorithm_source, comm_creation_source;
  // What the GEMM shapes did to the compute terms (planning/gemm_shapes.hpp); empty: every GEMM at the peak
  // or at the calibration's measured rate, whatever its shape.
  std::string gemm_shapes;

  double memory_bytes() const;
  std::vector<RunAttribute> attributes() const;  // machine_<field> and machine_<field>_source
  // "machine (dgx-h100.yaml): 8 ranks per node (machine section), ..." on a few lines.
  std::string describe() const;
};

// The first value given (> 0) of `candidates`, in order, with its source; (0, "") if none.
struct Candidate {
  double value;
  const char* source;
};
std::pair<double, std::string> first_given(std::initializer_list<Candidate> candidates);

// A value resolved by its caller (a run: MPI's node, the attainable GEMM rate, the memory budget; a
// simulation: the command line, the section, this machine) and where it came from.
struct Sourced {
  double value = 0.0;  // 0: unknown (memory: unbounded)
  std::string source;
};

// The machine from its section (named section_name: a deck or machine file, or "none") and the values
// its caller resolved: the NVLink domain is the section's, else the node. Throws InputError naming the
// section when the domain is not a multiple of the ranks per node.
ResolvedMachine resolve_machine(const MachineConfig& section, const std::string& section_name,
                                const Sourced& ranks_per_node, const Sourced& peak_gflops,
                                const Sourced& memory_gib);

// After the cost model took a calibration (links_measured: its intra- and inter-node links) and the
// machine (apply_machine): the links and the communicator creation time the model uses, and where they
// came from (creation_measured: the calibration measured the creation time).
void resolve_links(ResolvedMachine& resolved, const CostModel& cost, bool intra_measured, bool inter_measured,
                   const std::string& calibration, bool creation_measured = false);

}  // namespace minimllm
