#include "minimllm/driver/machine.hpp"

#include <fmt/format.h>

#include "minimllm/config/input_error.hpp"
#include "minimllm/planning/memory_fit.hpp"

namespace minimllm {
namespace {
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
}  // namespace

double ResolvedMachine::memory_bytes() const { return machine.memory_gib * kGiB; }

std::pair<double, std::string> first_given(std::initializer_list<Candidate> candidates) {
  for (const Candidate& c : candidates)
    if (c.value > 0.0) return {c.value, c.source};
  return {0.0, ""};
}

ResolvedMachine resolve_machine(const MachineConfig& section, const std::string& section_name,
                                const Sourced& ranks_per_node, const Sourced& peak_gflops,
                                const Sourced& memory_gib) {
  ResolvedMachine m;
  m.machine = section;
  m.section = section_name;
  m.machine.ranks_per_node = static_cast<int>(ranks_per_node.value);
  m.ranks_per_node_source = ranks_per_node.source;
  const auto [domain, domain_source] =
      first_given({{static_cast<double>(section.nvlink_domain), "machine section"},
                   {ranks_per_node.value, "ranks_per_node"}});
  m.machine.nvlink_domain = static_cast<int>(domain);
  m.nvlink_domain_source = domain_source;
  if (m.machine.nvlink_domain % m.machine.ranks_per_node != 0)
    throw InputError(
        fmt::format("{}: machine.nvlink_domain = {}: must be a multiple of the {} ranks per node ({})",
                    m.section, m.machine.nvlink_domain, m.machine.ranks_per_node, ranks_per_node.source));
  m.machine.peak_gflops = peak_gflops.value;
  m.peak_source = peak_gflops.source;
  m.machine.memory_gib = memory_gib.value;
  m.memory_source = memory_gib.source;
  return m;
}

void resolve_links(ResolvedMachine& r, const CostModel& cost, bool intra_measured, bool inter_measured,
                   const std::string& calibration, bool creation_measured) {
  const auto link = [&](const LinkCost& l, bool given, bool measured, std::string& source) {
    source = given      ? "machine section"
             : measured ? "measured: calibration " + calibration
                        : "nominal default";
    return LinkSpec{1e-9 * l.bandwidth, 1e6 * l.latency};
  };
  r.machine.intra_node =
      link(cost.intra_node, r.machine.intra_node.given(), intra_measured, r.intra_node_source);
  r.machine.inter_node =
      link(cost.inter_node, r.machine.inter_node.given(), inter_measured, r.inter_node_source);
  r.algorithm_source = r.machine.collective_algorithm.empty() ? "default" : "machine section";
  r.machine.collective_algorithm = to_string(cost.algorithm);
  r.comm_creation_source = r.machine.comm_creation_ms > 0.0 ? "machine section"
                           : creation_measured              ? "measured: calibration " + calibration
                                                            : "default (assumed: MPI on one node)";
  r.machine.comm_creation_ms = 1e3 * cost.step.comm_creation;
}

std::vector<RunAttribute> ResolvedMachine::attributes() const {
  const MachineConfig& m = machine;
  return {
      {"machine_section", section},
      {"machine_name", m.name},
      {"machine_ranks_per_node", static_cast<long long>(m.ranks_per_node)},
      {"machine_ranks_per_node_source", ranks_per_node_source},
      {"machine_nvlink_domain", static_cast<long long>(m.nvlink_domain)},
      {"machine_nvlink_domain_source", nvlink_domain_source},
      {"machine_memory_gib", m.memory_gib},
      {"machine_memory_source", memory_source},
      {"machine_peak_gflops", m.peak_gflops},
      {"machine_peak_source", peak_source},
      {"machine_intra_node_bandwidth_gbs", m.intra_node.bandwidth_gbs},
      {"machine_intra_node_latency_us", m.intra_node.latency_us},
      {"machine_intra_node_source", intra_node_source},
      {"machine_inter_node_bandwidth_gbs", m.inter_node.bandwidth_gbs},
      {"machine_inter_node_latency_us", m.inter_node.latency_us},
      {"machine_inter_node_source", inter_node_source},
      {"machine_collective_algorithm", m.collective_algorithm},
      {"machine_comm_creation_ms", m.comm_creation_ms},
      {"machine_comm_creation_source", comm_creation_source},
      {"machine_gemm_shapes", gemm_shapes.empty() ? "none: every GEMM at one rate" : gemm_shapes},
      {"machine", machine_to_yaml(m)},
  };
}

std::string ResolvedMachine::describe() const {
  const MachineConfig& m = machine;
  std::string out = fmt::format("machine ({}{}): {} ranks per node ({}), NVLink domain {} ({})\n", section,
                                m.name.empty() ? "" : ", " + m.name, m.ranks_per_node, ranks_per_node_source,
                                m.nvlink_domain, nvlink_domain_source);
  out += fmt::format(
      "  memory {} per rank ({}) | peak {:.1f} GFLOP/s per rank ({})\n", bytes_text(memory_bytes()),
      memory_source.empty() ? "unknown: not bounded" : memory_source, m.peak_gflops, peak_source);
  out += fmt::format(
      "  links: intra-node {:.1f} GB/s, {:.2f} us per step ({}) | inter-node {:.1f} GB/s, {:.2f} us ({}) | "
      "{} collectives ({})\n",
      m.intra_node.bandwidth_gbs, m.intra_node.latency_us, intra_node_source, m.inter_node.bandwidth_gbs,
      m.inter_node.latency_us, inter_node_source, m.collective_algorithm, algorithm_source);
  if (!comm_creation_source.empty())
    out += fmt::format("  communicator creation {:.3f} ms ({})\n", m.comm_creation_ms, comm_creation_source);
  if (!gemm_shapes.empty()) out += fmt::format("  GEMM shapes: {}\n", gemm_shapes);
  return out;
}

}  // namespace minimllm
