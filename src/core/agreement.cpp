#include "minimllm/core/agreement.hpp"

#include <climits>

namespace minimllm {

RankFailure agree_on_failure(MPI_Comm comm, int code, const std::string& message) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  // The lowest failing rank speaks; INT_MAX: none failed.
  int speaker = code != 0 ? rank : INT_MAX;
  MPI_Allreduce(MPI_IN_PLACE, &speaker, 1, MPI_INT, MPI_MIN, comm);
  RankFailure failure;
  if (speaker == INT_MAX) return failure;
  int sizes[2] = {code, static_cast<int>(message.size())};
  MPI_Bcast(sizes, 2, MPI_INT, speaker, comm);
  failure.code = sizes[0];
  failure.rank = speaker;
  failure.message = rank == speaker ? message : std::string(static_cast<size_t>(sizes[1]), '\0');
  MPI_Bcast(failure.message.data(), sizes[1], MPI_CHAR, speaker, comm);
  return failure;
}

}  // namespace minimllm
