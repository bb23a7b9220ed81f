// Which accelerator this rank drives: one GPU per rank, chosen from the rank's place on its node.
#pragma once

#include <mpi.h>

#include <string>

namespace minimllm {

// This process's rank among the processes of `comm` on its node: from an MPI_COMM_TYPE_SHARED split
// when MPI is initialised (collective over comm), else from the launcher's environment
// (launcher_local_rank), else 0.
int node_local_rank(MPI_Comm comm = MPI_COMM_WORLD);

// The node-local rank the launcher put in the environment (MPI_LOCALRANKID for MPICH/Hydra,
// OMPI_COMM_WORLD_LOCAL_RANK for Open MPI, MV2_COMM_WORLD_LOCAL_RANK for MVAPICH, SLURM_LOCALID), or -1.
// Not collective, unlike node_local_rank.
int launcher_local_rank();

// Kokkos::initialize for one MPI rank (collective over comm). With a CUDA backend it selects device
// node_local_rank % visible devices, since Kokkos 3.4 maps every MPICH rank to device 0; a device the
// user chose is left to Kokkos (Kokkos 3.x: KOKKOS_DEVICE_ID, KOKKOS_NUM_DEVICES, KOKKOS_RAND_DEVICES,
// --kokkos-device-id, --kokkos-num-devices; 4.x: KOKKOS_DEVICE_ID, KOKKOS_VISIBLE_DEVICES,
// KOKKOS_MAP_DEVICE_ID_BY, --kokkos-device-id, --kokkos-map-device-id-by). Host backends get
// Kokkos::initialize(). Before it, environment defaults are set where the user set nothing (see
// kokkos_environment_note). The argc/argv form lets Kokkos take its own --kokkos-* arguments out of argv,
// as Kokkos::initialize(argc, argv) does.
void initialize_kokkos(MPI_Comm comm, int& argc, char** argv);
void initialize_kokkos(MPI_Comm comm = MPI_COMM_WORLD);

// One line for the run banner naming the environment defaults initialize_kokkos set because the user had
// not: KOKKOS_DISABLE_WARNINGS=1 (Kokkos 3.4 and 4.x print multi-line warnings at initialisation, which
// would break one-line error messages) and, on the OpenMP backend when neither OMP_PROC_BIND nor
// OMP_PLACES is set, OMP_PROC_BIND=false (what the OpenMP runtime does then anyway: threads not pinned).
// Empty when nothing was set or before initialize_kokkos.
const std::string& kokkos_environment_note();

// Name of the GPU Kokkos runs on, as cudaGetDeviceProperties reports it (e.g. "NVIDIA H100 80GB HBM3"),
// or "host" on host backends. Call after initialize_kokkos.
std::string device_name();

// The PCI bus id of the GPU Kokkos runs on (e.g. "0000:1B:00.0"): the same on every rank that drives
// that GPU, whatever each rank's CUDA_VISIBLE_DEVICES, unlike the device ordinal. Empty on host backends
// or when the query fails.
std::string device_bus_id();

// How many ranks of comm on this node drive the same GPU as this rank (collective over comm; GPUs
// compared by device_bus_id). 1 on host backends, where every rank has its own cores.
int ranks_sharing_device(MPI_Comm comm);

// Memory this rank's allocations draw from, before dividing among the ranks that share it: the free
// memory of the GPU (cudaMemGetInfo) on CUDA, else the node's MemAvailable (/proc/meminfo). bytes < 0
// when it cannot be read. Call after initialize_kokkos. Not collective.
struct AvailableMemory {
  double bytes = -1.0;
  bool device = false;  // a GPU's free memory (shared by ranks_sharing_device), else the node's RAM
};
AvailableMemory available_memory();

}  // namespace minimllm
