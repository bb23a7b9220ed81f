// Provenance for /run: SHA-256 against FIPS 180-4 vectors, values gathered from every rank, the build
// facts CMake captured, and the SLURM job read from the environment.
#include <gtest/gtest.h>

#include <cstdlib>
#include <set>
#include <string>
#include <variant>

#include "minimllm/driver/cli.hpp"
#include "minimllm/driver/provenance.hpp"
#include "mpi_world.hpp"

namespace minimllm {
namespace {

using testing_support::world_rank;
using testing_support::world_size;

const RunAttribute* find(const std::vector<RunAttribute>& attributes, const std::string& name) {
  for (const RunAttribute& a : attributes)
    if (a.name == name) return &a;
  return nullptr;
}
std::string text(const std::vector<RunAttribute>& attributes, const std::string& name) {
  const RunAttribute* a = find(attributes, name);
  EXPECT_NE(a, nullptr) << name;
  if (!a) return "";
  EXPECT_TRUE(std::holds_alternative<std::string>(a->value)) << name << " is not a string";
  return std::holds_alternative<std::string>(a->value) ? std::get<std::string>(a->value) : "";
}
long long integer(const std::vector<RunAttribute>& attributes, const std::string& name) {
  const RunAttribute* a = find(attributes, name);
  EXPECT_NE(a, nullptr) << name;
  if (!a) return -999;
  EXPECT_TRUE(std::holds_alternative<long long>(a->value)) << name << " is not an integer";
  return std::holds_alternative<long long>(a->value) ? std::get<long long>(a->value) : -999;
}

TEST(Provenance, Sha256MatchesFipsVectors) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  // 56 bytes: the padding needs a second block.
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256_hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  // Lengths around the block and padding boundaries (55: padding fits one block; 56-63: it does not).
  EXPECT_EQ(sha256_hex(std::string(55, 'x')),
            "d5e285683cd4efc02d021a5c62014694958901005d6f71e89e0989fac77e4072");
  EXPECT_EQ(sha256_hex(std::string(63, 'x')),
            "75220b47218278e656f2013bb8f0c455a25eaf01e86c64924e9d48d89776d6f2");
  EXPECT_EQ(sha256_hex(std::string(64, 'x')),
            "7ce100971f64e7001e8fe5a51973ecdfe1ced42befe7ee8d5fd6219506b5393c");
  EXPECT_EQ(sha256_hex(std::string(119, 'x')),
            "000b48d4edf0fa7bee3c6236ecd2785baa5db4eeb8bb54341b029e0d9fa5fb0c");
  EXPECT_EQ(sha256_hex(std::string(120, 'x')),
            "13f05a0b594787f5ecd315edc96141bd3243203d1b7d4f0836f37308b276ba98");
}

TEST(Provenance, DistinctValuesAreGatheredFromEveryRank) {
  // Ranks 0, 2, 4... say "even", the others "odd"; rank-0-only values must not be all there is.
  const std::string joined =
      distinct_over_ranks(world_rank() % 2 ? "odd" : "even", World::of(MPI_COMM_WORLD));
  EXPECT_EQ(joined, world_size() > 1 ? "even\nodd" : "even");
  EXPECT_EQ(distinct_over_ranks("", World::of(MPI_COMM_WORLD)), "");
}

TEST(Provenance, RecordsDeckBuildHostsAndRanks) {
  const RunConfig config = parse_run_config(embedded_quickstart_deck(), "<embedded quickstart deck>");
  const auto p = gather_provenance(config, World::of(MPI_COMM_WORLD), "minimllm run --steps 2");
  EXPECT_EQ(text(p, "deck_text"), config.deck_text);
  EXPECT_EQ(text(p, "deck_sha256"), sha256_hex(config.deck_text));
  EXPECT_EQ(text(p, "command_line"), "minimllm run --steps 2");
  const std::string revision = text(p, "git_revision");
  EXPECT_TRUE(revision == "unknown" ||
              (revision.size() == 40 && revision.find_first_not_of("0123456789abcdef") == std::string::npos))
      << revision;
  const long long dirty = integer(p, "git_dirty");
  EXPECT_TRUE(dirty == 0 || dirty == 1 || (dirty == -1 && revision == "unknown")) << dirty;
  EXPECT_FALSE(text(p, "compiler").empty());
  EXPECT_EQ(integer(p, "ranks"), world_size());
  // Every rank runs on this machine here: one host, every rank on it.
  EXPECT_EQ(text(p, "hostnames"), host_name());
  EXPECT_EQ(integer(p, "nodes"), 1);
  EXPECT_EQ(integer(p, "ranks_per_node"), world_size());
  EXPECT_FALSE(text(p, "devices").empty());
  EXPECT_NE(text(p, "kokkos").find("Kokkos"), std::string::npos);
  EXPECT_FALSE(text(p, "mpi_library").empty());
}

TEST(Provenance, SlurmJobAndEnvironmentComeFromTheEnvironment) {
  const RunConfig config = parse_run_config(embedded_quickstart_deck(), "<embedded quickstart deck>");
  const World world = World::of(MPI_COMM_WORLD);
  // Outside SLURM (ctest may itself run under a job: clear what this test sets and compares).
  unsetenv("SLURM_JOB_ID");
  unsetenv("SLURM_NTASKS");
  unsetenv("SLURM_TEST_MINIMLLM");
  const std::string outside = slurm_environment();
  EXPECT_EQ(text(gather_provenance(config, world, ""), "slurm_job_id"), "");
  setenv("SLURM_JOB_ID", "4242", 1);
  setenv("SLURM_NTASKS", "3", 1);
  setenv("SLURM_TEST_MINIMLLM", "a=b c", 1);
  setenv("NOT_SLURM_X", "1", 1);
  const auto p = gather_provenance(config, world, "");
  EXPECT_EQ(text(p, "slurm_job_id"), "4242");
  const std::string env = text(p, "slurm_environment");
  EXPECT_NE(env.find("SLURM_JOB_ID=4242"), std::string::npos) << env;
  EXPECT_NE(env.find("SLURM_NTASKS=3\n"), std::string::npos) << env;  // sorted: SLURM_TEST_... follows
  EXPECT_NE(env.find("SLURM_TEST_MINIMLLM=a=b c"), std::string::npos) << env;
  EXPECT_EQ(env.find("NOT_SLURM"), std::string::npos) << env;
  EXPECT_LT(env.find("SLURM_JOB_ID"), env.find("SLURM_NTASKS"));
  unsetenv("SLURM_JOB_ID");
  unsetenv("SLURM_NTASKS");
  unsetenv("SLURM_TEST_MINIMLLM");
  unsetenv("NOT_SLURM_X");
  EXPECT_EQ(slurm_environment(), outside);
}

}  // namespace
}  // namespace minimllm
