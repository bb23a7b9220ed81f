// The machine section (machine_config.hpp): reading it strictly, machine files, and writing it back.
#include "minimllm/config/machine_config.hpp"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <sstream>

#include "minimllm/config/strict_yaml.hpp"

namespace minimllm {
namespace {

using strict_yaml::above;
using strict_yaml::at_least;
using strict_yaml::Section;

constexpr int kMaxRanks = 1 << 24;

LinkSpec read_link(const Section& parent, const std::string& key) {
  LinkSpec link;
  const Section s = parent.section(key, {"bandwidth_gbs", "latency_us"});
  if (!parent.has(key) || parent.child(key).IsNull()) return link;
  s.require("bandwidth_gbs");
  s.require("latency_us");
  s.read_real("bandwidth_gbs", link.bandwidth_gbs, above(0.0));
  s.read_real("latency_us", link.latency_us, at_least(0.0));
  return link;
}

GemmSpec read_gemm(const Section& parent) {
  GemmSpec gemm;
  const Section s =
      parent.section("gemm", {"efficiency", "memory_gbs", "launch_us", "tile", "units", "bytes_per_element"});
  if (!parent.has("gemm") || parent.child("gemm").IsNull()) return gemm;
  for (const char* key : {"efficiency", "memory_gbs", "launch_us", "tile", "units"}) s.require(key);
  // Bounded away from 0: a GEMM's time stays finite for any shape the cost model asks about.
  s.read_real("efficiency", gemm.efficiency, strict_yaml::closed(0.01, 1.0));
  s.read_real("memory_gbs", gemm.memory_gbs, at_least(0.001));
  s.read_real("launch_us", gemm.launch_us, strict_yaml::closed(0.0, 1e6));
  std::vector<int> tile;
  s.read_int_list("tile", tile, 1, 1 << 16);
  if (tile.size() != 3) s.fail_at("tile", "must be three sizes: [m, n, k], the output tile and its k-block");
  gemm.tile_m = tile[0], gemm.tile_n = tile[1], gemm.tile_k = tile[2];
  s.read_int("units", gemm.units, 1, 1 << 20);
  s.read_int("bytes_per_element", gemm.bytes_per_element, 1, 8);
  return gemm;
}

// Shortest text that reads back as the same double.
std::string number(double v) { return fmt::format("{}", v); }

}  // namespace

bool MachineConfig::empty() const {
  return name.empty() && ranks_per_node == 0 && nvlink_domain == 0 && memory_gib == 0.0 &&
         peak_gflops == 0.0 && !intra_node.given() && !inter_node.given() && collective_algorithm.empty() &&
         comm_creation_ms == 0.0 && activation_precision.empty() && cp_overlap < 0.0 && !gemm.given();
}

const std::vector<std::string>& machine_keys() {
  static const std::vector<std::string> keys = {"name",
                                                "ranks_per_node",
                                                "nvlink_domain",
                                                "memory_gib",
                                                "peak_gflops",
                                                "intra_node",
                                                "inter_node",
                                                "collective_algorithm",
                                                "comm_creation_ms",
                                                "activation_precision",
                                                "cp_overlap",
                                                "gemm"};
  return keys;
}

MachineConfig read_machine(const Section& s) {
  MachineConfig m;
  s.read_text("name", m.name);
  s.read_int("ranks_per_node", m.ranks_per_node, 1, kMaxRanks);
  s.read_int("nvlink_domain", m.nvlink_domain, 1, kMaxRanks);
  s.read_real("memory_gib", m.memory_gib, above(0.0));
  s.read_real("peak_gflops", m.peak_gflops, above(0.0));
  m.intra_node = read_link(s, "intra_node");
  m.inter_node = read_link(s, "inter_node");
  s.read_choice("collective_algorithm", m.collective_algorithm, {"ring", "tree"});
  s.read_real("comm_creation_ms", m.comm_creation_ms, above(0.0));
  s.read_choice("activation_precision", m.activation_precision, {"fp32", "bf16"});
  s.read_real("cp_overlap", m.cp_overlap, strict_yaml::closed(0.0, 1.0));
  m.gemm = read_gemm(s);
  // A domain holds whole nodes (an NVL72 rack of 18 nodes of 4 GPUs: nvlink_domain 72, ranks_per_node 4).
  if (m.nvlink_domain > 0 && m.ranks_per_node > 0 && m.nvlink_domain % m.ranks_per_node != 0)
    s.fail_at("nvlink_domain",
              fmt::format("must be a multiple of {} (= {}): an NVLink domain holds whole nodes",
                          s.path_of("ranks_per_node"), m.ranks_per_node));
  return m;
}

MachineConfig parse_machine_text(const std::string& yaml_text, const std::string& origin) {
  const std::vector<YAML::Node> documents = load_yaml_documents(yaml_text, origin);
  const std::string expected =
      "a machine file is one YAML map with a `machine:` section (docs/INPUT.md, \"machine\"), or a "
      "calibration file from minimllm calibrate";
  if (documents.size() != 1 || !documents[0].IsMap())
    strict_yaml::fail(origin, "(top level)", documents.empty() ? "(empty)" : strict_yaml::show(documents[0]),
                      expected);
  const YAML::Node& root = documents[0];
  // A calibration file carries its own keys (checked where it is used as a calibration); any other file
  // holds the machine section alone.
  std::vector<std::string> top_keys = {"machine"};
  if (root["format"]) {
    for (const auto& entry : root) {
      const std::string key = entry.first.IsScalar() ? entry.first.Scalar() : "";
      if (key != "machine") top_keys.push_back(key);
    }
  }
  const Section top(origin, root, "", top_keys);
  top.require("machine");
  return read_machine(top.required_section("machine", machine_keys()));
}

MachineConfig load_machine_file(const std::string& path) {
  return parse_machine_text(read_input_file(path, "machine file"), path);
}

std::string machine_to_yaml(const MachineConfig& m) {
  std::ostringstream o;
  o << "machine:\n";
  if (!m.name.empty()) o << fmt::format("  name: \"{}\"\n", m.name);
  if (m.ranks_per_node > 0) o << fmt::format("  ranks_per_node: {}\n", m.ranks_per_node);
  if (m.nvlink_domain > 0) o << fmt::format("  nvlink_domain: {}\n", m.nvlink_domain);
  if (m.memory_gib > 0.0) o << fmt::format("  memory_gib: {}\n", number(m.memory_gib));
  if (m.peak_gflops > 0.0) o << fmt::format("  peak_gflops: {}\n", number(m.peak_gflops));
  const auto link = [&](const char* key, const LinkSpec& l) {
    if (l.given())
      o << fmt::format("  {}: {{bandwidth_gbs: {}, latency_us: {}}}\n", key, number(l.bandwidth_gbs),
                       number(l.latency_us));
  };
  link("intra_node", m.intra_node);
  link("inter_node", m.inter_node);
  if (!m.collective_algorithm.empty())
    o << fmt::format("  collective_algorithm: {}\n", m.collective_algorithm);
  if (m.comm_creation_ms > 0.0) o << fmt::format("  comm_creation_ms: {}\n", number(m.comm_creation_ms));
  if (!m.activation_precision.empty())
    o << fmt::format("  activation_precision: {}\n", m.activation_precision);
  if (m.cp_overlap >= 0.0) o << fmt::format("  cp_overlap: {}\n", number(m.cp_overlap));
  if (m.gemm.given())
    o << fmt::format(
        "  gemm: {{efficiency: {}, memory_gbs: {}, launch_us: {}, tile: [{}, {}, {}], units: {}, "
        "bytes_per_element: {}}}\n",
        number(m.gemm.efficiency), number(m.gemm.memory_gbs), number(m.gemm.launch_us), m.gemm.tile_m,
        m.gemm.tile_n, m.gemm.tile_k, m.gemm.units, m.gemm.bytes_per_element);
  return o.str();
}

}  // namespace minimllm
