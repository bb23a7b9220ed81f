// choose_collectives: the run's collective backend, from what the build and the machine offer. It sits
// above both backends (it creates either); neither backend calls it.
#include <fmt/format.h>

#include <stdexcept>
#include <string>

#include "minimllm/core/types.hpp"
#include "minimllm/parallel/communicator.hpp"

namespace minimllm {

CollectivesChoice choose_collectives(MPI_Comm world, const std::string& requested) {
  if (requested != "auto" && requested != "mpi" && requested != "nccl") {
    throw std::invalid_argument(
        fmt::format("collectives backend '{}' is unknown; valid: auto, mpi, nccl", requested));
  }
  const char* mpi_reason =
      kMemSpaceIsHostAccessible ? "host memory, in place" : "device buffers staged through host memory";
  if (requested == "mpi") return {"mpi", fmt::format("requested; {}", mpi_reason), create_mpi_communicator};
  std::string why;
  if (nccl_device_path_available(world, why)) {
    return {"nccl", "device memory on NCCL's stream, no host staging", create_nccl_communicator};
  }
  if (requested == "nccl") {
    throw std::runtime_error(fmt::format("runtime.collectives is nccl, but NCCL cannot run here: {}", why));
  }
  return {"mpi", fmt::format("{} ({})", mpi_reason, why), create_mpi_communicator};
}

}  // namespace minimllm
