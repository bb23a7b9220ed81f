#include "minimllm/driver/device.hpp"

#include <Kokkos_Core.hpp>
#include <cstdlib>
#include <type_traits>

#ifdef KOKKOS_ENABLE_CUDA
#include <cuda_runtime.h>
#endif

namespace minimllm {

int node_local_rank(MPI_Comm comm) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) {
    MPI_Comm node = MPI_COMM_NULL;
    if (MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) == MPI_SUCCESS &&
        node != MPI_COMM_NULL) {
      int rank = 0;
      MPI_Comm_rank(node, &rank);
      MPI_Comm_free(&node);
      return rank;
    }
  }
  for (const char* name : {"MPI_LOCALRANKID", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"}) {
    if (const char* value = std::getenv(name)) return std::atoi(value);
  }
  return 0;
}

void initialize_kokkos(MPI_Comm comm) {
  int device_id = -1;  // -1: Kokkos's own choice
#ifdef KOKKOS_ENABLE_CUDA
  const int local_rank = node_local_rank(comm);  // collective: every rank calls it, even with a user choice
  const bool user_chose = std::getenv("KOKKOS_DEVICE_ID") || std::getenv("KOKKOS_NUM_DEVICES") ||
                          std::getenv("KOKKOS_RAND_DEVICES");
  int count = 0;
  // A failing query (no driver, no device) leaves the choice, and the error message, to Kokkos.
  if (!user_chose && cudaGetDeviceCount(&count) == cudaSuccess && count > 0) device_id = local_rank % count;
#else
  (void)comm;
#endif
  if (device_id < 0) {
    Kokkos::initialize();
    return;
  }
#if KOKKOS_VERSION >= 30700  // InitArguments: deprecated in 3.7, removed in 4.3
  Kokkos::initialize(Kokkos::InitializationSettings().set_device_id(device_id));
#else
  Kokkos::InitArguments args;
  args.device_id = device_id;
  Kokkos::initialize(args);
#endif
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

}  // namespace minimllm
