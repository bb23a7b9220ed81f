#include "minimllm/driver/agreement.hpp"

#include <string>

#include "minimllm/config/input_error.hpp"

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

}  // namespace minimllm
