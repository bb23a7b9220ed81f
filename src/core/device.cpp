#include "minimllm/core/device.hpp"

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <type_traits>
#include <vector>

#ifdef KOKKOS_ENABLE_CUDA
#include <cuda_runtime.h>
#endif

namespace minimllm {

namespace {

// MPI_COMM_TYPE_SHARED split of comm (the ranks of this node), or MPI_COMM_NULL when MPI is not running.
MPI_Comm node_comm(MPI_Comm comm) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  MPI_Comm node = MPI_COMM_NULL;
  if (initialized && !finalized &&
      MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) != MPI_SUCCESS)
    node = MPI_COMM_NULL;
  return node;
}

#ifdef KOKKOS_ENABLE_CUDA
// The device settings of the Kokkos in use (3.x and 4.x read different ones).
bool user_chose_device(int argc, char** argv) {
#if KOKKOS_VERSION >= 40000
  const auto variables = {"KOKKOS_DEVICE_ID", "KOKKOS_VISIBLE_DEVICES", "KOKKOS_MAP_DEVICE_ID_BY"};
  const auto flags = {"--kokkos-device-id", "--kokkos-map-device-id-by"};
#else
  const auto variables = {"KOKKOS_DEVICE_ID", "KOKKOS_NUM_DEVICES", "KOKKOS_RAND_DEVICES"};
  const auto flags = {"--kokkos-device-id", "--kokkos-num-devices", "--device-id", "--num-devices"};
#endif
  for (const char* name : variables)
    if (std::getenv(name)) return true;
  for (int i = 1; i < argc; ++i) {
    for (const char* flag : flags)
      if (std::strncmp(argv[i], flag, std::strlen(flag)) == 0) return true;
  }
  return false;
}
#endif

std::string g_kokkos_environment_note;

// Kokkos's environment defaults (kokkos_environment_note): set only what the user left unset.
void set_kokkos_environment_defaults() {
  std::string note;
#ifdef KOKKOS_ENABLE_OPENMP
  // Neither set: the OpenMP runtime, which read its environment when it loaded, pins no thread; say so
  // explicitly, as Kokkos asks (binding is the launcher's or the user's choice, e.g. spread + threads
  // with ranks bound to exclusive cores).
  if (!std::getenv("OMP_PROC_BIND") && !std::getenv("OMP_PLACES")) {
    setenv("OMP_PROC_BIND", "false", 0);
    note = "OMP_PROC_BIND=false (threads not pinned; set OMP_PROC_BIND/OMP_PLACES to pin them)";
  }
#endif
  // Kokkos prints multi-line warnings (OpenMP binding, oversubscription) on stderr at initialisation,
  // which would break the one-line error contract of the command line.
  if (!std::getenv("KOKKOS_DISABLE_WARNINGS")) {
    setenv("KOKKOS_DISABLE_WARNINGS", "1", 0);  // "1": true for Kokkos 3.4 and 4.x alike
    note += std::string(note.empty() ? "" : ", ") +
            "KOKKOS_DISABLE_WARNINGS=1 (set it to 0 to see Kokkos's warnings)";
  }
  g_kokkos_environment_note = note.empty() ? note : "environment defaults: " + note;
}

}  // namespace

const std::string& kokkos_environment_note() { return g_kokkos_environment_note; }

int node_local_rank(MPI_Comm comm) {
  MPI_Comm node = node_comm(comm);
  if (node != MPI_COMM_NULL) {
    int rank = 0;
    MPI_Comm_rank(node, &rank);
    MPI_Comm_free(&node);
    return rank;
  }
  const int from_launcher = launcher_local_rank();
  return from_launcher >= 0 ? from_launcher : 0;
}

int launcher_local_rank() {
  for (const char* name :
       {"MPI_LOCALRANKID", "OMPI_COMM_WORLD_LOCAL_RANK", "MV2_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"}) {
    if (const char* value = std::getenv(name)) return std::atoi(value);
  }
  return -1;
}

void initialize_kokkos(MPI_Comm comm, int& argc, char** argv) {
  int device_id = -1;  // -1: Kokkos's own choice
#ifdef KOKKOS_ENABLE_CUDA
  const int local_rank = node_local_rank(comm);  // collective: every rank calls it, even with a user choice
  int count = 0;
  // A failing query (no driver, no device) leaves the choice, and the error message, to Kokkos.
  if (!user_chose_device(argc, argv) && cudaGetDeviceCount(&count) == cudaSuccess && count > 0)
    device_id = local_rank % count;
#else
  (void)comm;
#endif
  // The choice goes to Kokkos as its own argument, which Kokkos 3.4 and 4.x both take and remove.
  std::string device_arg = "--kokkos-device-id=" + std::to_string(device_id);
  std::vector<char*> args(argv, argv + argc);
  if (device_id >= 0) args.push_back(&device_arg[0]);
  args.push_back(nullptr);
  int kokkos_argc = static_cast<int>(args.size()) - 1;
  set_kokkos_environment_defaults();
  Kokkos::initialize(kokkos_argc, args.data());
  // What Kokkos left, less our own argument, goes back to the caller (never more than it gave).
  int kept = 0;
  for (int i = 0; i < kokkos_argc; ++i)
    if (args[i] != &device_arg[0]) argv[kept++] = args[i];
  if (kept < argc) argv[kept] = nullptr;
  argc = kept;
}

void initialize_kokkos(MPI_Comm comm) {
  char program[] = "minimllm";
  char* argv[] = {program, nullptr};
  int argc = 1;
  initialize_kokkos(comm, argc, argv);
}

std::string device_name() {
#ifdef KOKKOS_ENABLE_CUDA
  if (std::is_same<Kokkos::DefaultExecutionSpace, Kokkos::Cuda>::value) {
    int device = 0;
    cudaDeviceProp prop{};
    if (cudaGetDevice(&device) == cudaSuccess && cudaGetDeviceProperties(&prop, device) == cudaSuccess)
      return prop.name;
    return "unknown CUDA device";
  }
#endif
  return "host";
}

std::string device_bus_id() {
#ifdef KOKKOS_ENABLE_CUDA
  if (std::is_same<Kokkos::DefaultExecutionSpace, Kokkos::Cuda>::value) {
    int device = 0;
    std::array<char, 32> id{};
    if (cudaGetDevice(&device) == cudaSuccess &&
        cudaDeviceGetPCIBusId(id.data(), static_cast<int>(id.size()), device) == cudaSuccess)
      return id.data();
  }
#endif
  return "";
}

int ranks_sharing_device(MPI_Comm comm) {
  MPI_Comm node = node_comm(comm);
  if (node == MPI_COMM_NULL) return 1;
  int node_size = 1;
  MPI_Comm_size(node, &node_size);
  std::array<char, 32> mine{};
  const std::string id = device_bus_id();
  std::strncpy(mine.data(), id.c_str(), mine.size() - 1);
  std::vector<std::array<char, 32>> all(node_size);
  MPI_Allgather(mine.data(), static_cast<int>(mine.size()), MPI_CHAR, all.data(),
                static_cast<int>(mine.size()), MPI_CHAR, node);
  MPI_Comm_free(&node);
  if (id.empty()) return 1;
  return static_cast<int>(std::count(all.begin(), all.end(), mine));
}

AvailableMemory available_memory() {
  AvailableMemory available;
#ifdef KOKKOS_ENABLE_CUDA
  if (std::is_same<Kokkos::DefaultExecutionSpace, Kokkos::Cuda>::value) {
    std::size_t free_bytes = 0, total_bytes = 0;
    available.device = true;
    if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) available.bytes = double(free_bytes);
    return available;
  }
#endif
  std::ifstream meminfo("/proc/meminfo");
  for (std::string line; std::getline(meminfo, line);)
    if (line.rfind("MemAvailable:", 0) == 0) {
      available.bytes = std::stod(line.substr(13)) * 1024.0;  // kB
      break;
    }
  return available;
}

}  // namespace minimllm
