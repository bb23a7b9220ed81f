// Summary statistics of measured samples (step times, rates, calibration timings).
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace minimllm {

// The median (the mean of the two middle values for an even count); 0 for no values.
inline double median(std::vector<double> values) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

}  // namespace minimllm
