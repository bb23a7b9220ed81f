#include "minimllm/planning/gemm_rates.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <tuple>

namespace minimllm {

GemmRates GemmRates::at_peak(double peak_gflops) {
  GemmRates rates;
  rates.peak_flops_ = 1e9 * peak_gflops;
  return rates;
}

GemmRates GemmRates::roofline(double peak_gflops, const GemmSpec& spec) {
  GemmRates rates = at_peak(peak_gflops);
  if (!spec.given()) return rates;
  rates.kind_ = Kind::roofline;
  rates.spec_ = spec;
  return rates;
}

GemmRates GemmRates::measured(std::vector<GemmRatePoint> points) {
  if (points.empty()) throw std::invalid_argument("GemmRates::measured: no point");
  for (const GemmRatePoint& p : points)
    if (p.m <= 0 || p.n <= 0 || p.k <= 0 || !(p.gflops > 0.0))
      throw std::invalid_argument(
          fmt::format("GemmRates::measured: point {}x{}x{} at {} GFLOP/s", p.m, p.n, p.k, p.gflops));
  std::sort(points.begin(), points.end(), [](const GemmRatePoint& a, const GemmRatePoint& b) {
    return std::tie(a.n, a.k, a.m) < std::tie(b.n, b.k, b.m);
  });
  GemmRates rates;
  rates.kind_ = Kind::measured;
  rates.points_ = std::move(points);
  return rates;
}

double GemmRates::seconds(const GemmShape& shape) const {
  if (shape.m <= 0.0 || shape.n <= 0.0 || shape.k <= 0.0) return 0.0;
  if (kind_ == Kind::peak) return shape.flops() / peak_flops_;
  if (kind_ == Kind::measured) return shape.flops() / (1e9 * measured_gflops(shape));
  const GemmSpec& s = spec_;
  // Stream-K: every whole tile's k-blocks spread evenly over the units; the last round as long as a full one.
  const double blocks =
      std::ceil(shape.m / s.tile_m) * std::ceil(shape.n / s.tile_n) * std::ceil(shape.k / s.tile_k);
  const double rounds = std::ceil(blocks / s.units);
  const double compute =
      rounds * s.units * 2.0 * s.tile_m * s.tile_n * s.tile_k / (s.efficiency * peak_flops_);
  const double bytes = s.bytes_per_element * (shape.m * shape.k + shape.k * shape.n + shape.m * shape.n);
  return 1e-6 * s.launch_us + std::max(compute, bytes / (1e9 * s.memory_gbs));
}

double GemmRates::measured_gflops(const GemmShape& shape) const {
  // The (n, k) of the points nearest the shape's in log distance.
  const auto distance = [&](const GemmRatePoint& p) {
    return std::hypot(std::log(p.n / shape.n), std::log(p.k / shape.k));
  };
  const GemmRatePoint* nearest = &points_.front();
  for (const GemmRatePoint& p : points_)
    if (distance(p) < distance(*nearest)) nearest = &p;
  const auto same = [&](const GemmRatePoint& p) { return p.n == nearest->n && p.k == nearest->k; };
  const auto first = std::find_if(points_.begin(), points_.end(), same);
  const auto last = std::find_if_not(first, points_.end(), same);  // sorted by m within (n, k)
  if (shape.m <= first->m) return first->gflops;
  if (shape.m >= std::prev(last)->m) return std::prev(last)->gflops;
  const auto above = std::find_if(first, last, [&](const GemmRatePoint& p) { return p.m >= shape.m; });
  const GemmRatePoint &hi = *above, &lo = *std::prev(above);
  const double t = std::log(shape.m / lo.m) / std::log(static_cast<double>(hi.m) / lo.m);
  return lo.gflops + t * (hi.gflops - lo.gflops);
}

std::string GemmRates::describe() const {
  switch (kind_) {
    case Kind::peak:
      return fmt::format("every GEMM at {:.1f} GFLOP/s", 1e-9 * peak_flops_);
    case Kind::roofline:
      return fmt::format(
          "roofline (machine.gemm): {:.0f}% of {:.1f} GFLOP/s, tiles {}x{}x{} on {} units, {} GB/s, launch "
          "{} us",
          100.0 * spec_.efficiency, 1e-9 * peak_flops_, spec_.tile_m, spec_.tile_n, spec_.tile_k, spec_.units,
          spec_.memory_gbs, spec_.launch_us);
    case Kind::measured:
      return fmt::format("measured at {} shapes (gemm_rates)", points_.size());
  }
  return {};
}

}  // namespace minimllm
