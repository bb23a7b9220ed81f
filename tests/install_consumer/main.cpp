// Links the installed minimllm::driver and calls it: prints what `minimllm --version` prints and checks
// that it names the project and a BLAS line (exit 1 otherwise).
#include <iostream>
#include <string>

#include "minimllm/driver/provenance.hpp"

int main() {
  const std::string text = minimllm::version_text();
  std::cout << text;
  return text.rfind("minimllm ", 0) == 0 && text.find("\nBLAS: ") != std::string::npos ? 0 : 1;
}
