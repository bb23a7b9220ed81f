#include "minimllm/driver/agreement.hpp"

#include <fmt/format.h>

#include <climits>
#include <string>

#include "minimllm/config/input_error.hpp"
#include "minimllm/core/sha256.hpp"

namespace minimllm {

void agree_on_error(MPI_Comm comm, std::exception_ptr error) {
  int code = 0;
  std::string message;
  if (error) {
    try {
      std::rethrow_exception(error);
    } catch (const AgreedFailure& e) {
      code = 1, message = e.what();
    } catch (const InputError& e) {
      code = 2, message = e.what();
    } catch (const std::exception& e) {
      code = 1, message = e.what();
    } catch (...) {
      code = 1, message = "unknown exception";
    }
  }
  const RankFailure failure = agree_on_failure(comm, code, message);
  if (!failure) return;
  if (failure.code == 2) throw InputError(failure.message);
  throw AgreedFailure(failure.rank, failure.message);
}

void agree_on_input_contents(MPI_Comm comm, const std::vector<InputText>& inputs) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  for (const InputText& input : inputs) {
    int missing = input.present ? 0 : 1;
    MPI_Allreduce(MPI_IN_PLACE, &missing, 1, MPI_INT, MPI_MAX, comm);
    if (missing) continue;
    constexpr int kHex = 64;
    const std::string mine = sha256_hex(input.text);
    std::string root = mine;
    MPI_Bcast(root.data(), kHex, MPI_CHAR, 0, comm);
    int first = mine == root ? INT_MAX : rank;
    MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, comm);
    if (first == INT_MAX) continue;
    std::string other = mine;
    MPI_Bcast(other.data(), kHex, MPI_CHAR, first, comm);
    throw InputError(fmt::format(
        "{}: the {} differs between ranks: rank {} read sha256 {}, rank 0 read {}; every rank must read the "
        "same {}",
        input.path, input.what, first, other.substr(0, 12), root.substr(0, 12), input.what));
  }
}

}  // namespace minimllm
