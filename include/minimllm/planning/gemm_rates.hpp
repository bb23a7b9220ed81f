// GemmRates: the seconds one GEMM of a given shape takes on one rank, for the cost model (a narrow
// tensor-parallel slice or a short micro-batch runs below the rate of a GEMM that fills the machine).
// Three sources:
//   at the peak   every shape at one rate (no machine.gemm, no measured rates): FLOPs / peak;
//   roofline      machine.gemm (config/machine_config.hpp, GemmSpec): launch + max(compute, operand bytes /
//                 memory bandwidth), the compute with the tile quantization of a tiled kernel (NVIDIA's
//                 "Matrix Multiplication Background User's Guide") and the k-block rounds of a stream-K
//                 one (Osama et al., "Stream-K", PPoPP 2023: a short, wide output still fills the units);
//   measured      `minimllm calibrate`'s gemm_rates: GFLOP/s at (m, n, k) points on the calibrating
//                 machine; a shape is read from the points of its own (n, k), or of the nearest (n, k) in
//                 log distance, interpolated linearly in log m and held constant beyond the ends.
// The cost model weighs a layout's GEMM shapes with it (gemm_shape_factor, planning/gemm_shapes.hpp).
#pragma once

#include <string>
#include <vector>

#include "minimllm/config/machine_config.hpp"

namespace minimllm {

// C[m x n] += A[m x k] B[k x n]: 2 m n k FLOPs.
struct GemmShape {
  double m = 0.0, n = 0.0, k = 0.0;
  double flops() const { return 2.0 * m * n * k; }
};

// One measured point (a calibration's gemm_rates).
struct GemmRatePoint {
  int m = 0, n = 0, k = 0;
  double gflops = 0.0;
};

class GemmRates {
 public:
  GemmRates() = default;  // at a peak of 1 GFLOP/s: give one with at_peak
  static GemmRates at_peak(double peak_gflops);
  static GemmRates roofline(double peak_gflops, const GemmSpec& spec);
  static GemmRates measured(std::vector<GemmRatePoint> points);  // at least one point, every rate > 0

  double seconds(const GemmShape& shape) const;
  // Whether the rate depends on the shape (roofline or measured).
  bool shape_dependent() const { return kind_ != Kind::peak; }
  std::string describe() const;  // one line for banners and /run

 private:
  enum class Kind { peak, roofline, measured };
  double measured_gflops(const GemmShape& shape) const;

  Kind kind_ = Kind::peak;
  double peak_flops_ = 1e9;
  GemmSpec spec_;
  std::vector<GemmRatePoint> points_;  // sorted by (n, k, m)
};

}  // namespace minimllm
