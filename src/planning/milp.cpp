#include "milp.hpp"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#ifdef MINIMLLM_HAVE_CBC
#include <CbcModel.hpp>
#include <CbcStrategy.hpp>
#include <CoinPackedMatrix.hpp>
#include <OsiClpSolverInterface.hpp>
#endif

namespace minimllm::planning {

int MilpProblem::add_column(double lower, double upper, double cost, bool is_integer) {
  col_lower.push_back(lower);
  col_upper.push_back(upper);
  objective.push_back(cost);
  integer.push_back(is_integer ? 1 : 0);
  return columns() - 1;
}

int MilpProblem::add_row(double lower, double upper) {
  row_lower.push_back(lower);
  row_upper.push_back(upper);
  return rows() - 1;
}

void MilpProblem::add_entry(int row, int col, double value) {
  entry_row.push_back(row);
  entry_col.push_back(col);
  entry_value.push_back(value);
}

const char* to_string(MilpStatus status) {
  switch (status) {
    case MilpStatus::optimal:
      return "optimal";
    case MilpStatus::time_limit:
      return "time_limit";
    case MilpStatus::no_solution:
      return "no_solution";
    case MilpStatus::too_large:
      return "too_large";
    case MilpStatus::unavailable:
      return "unavailable";
  }
  return "unknown";
}

double MilpSolution::gap() const {
  if (x.empty() || !std::isfinite(objective) || !std::isfinite(bound)) return kMilpInfinity;
  if (status == MilpStatus::optimal) return 0.0;
  const double scale = std::max(std::abs(objective), 1e-300);
  return std::max(0.0, (objective - bound) / scale);
}

#ifdef MINIMLLM_HAVE_CBC

bool milp_solver_available() { return true; }

MilpSolution solve_milp(const MilpProblem& problem, const std::vector<double>& start,
                        double time_limit_seconds) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  const int n = problem.columns(), m = problem.rows();
  const auto finite = [](double v) { return std::isfinite(v) ? v : (v > 0 ? COIN_DBL_MAX : -COIN_DBL_MAX); };
  std::vector<double> col_lower(n), col_upper(n), row_lower(m), row_upper(m);
  for (int j = 0; j < n; ++j)
    col_lower[j] = finite(problem.col_lower[j]), col_upper[j] = finite(problem.col_upper[j]);
  for (int i = 0; i < m; ++i)
    row_lower[i] = finite(problem.row_lower[i]), row_upper[i] = finite(problem.row_upper[i]);
  CoinPackedMatrix matrix(true, problem.entry_row.data(), problem.entry_col.data(),
                          problem.entry_value.data(), static_cast<CoinBigIndex>(problem.entry_value.size()));
  matrix.setDimensions(m, n);

  OsiClpSolverInterface solver;
  solver.messageHandler()->setLogLevel(0);
  solver.loadProblem(matrix, col_lower.data(), col_upper.data(), problem.objective.data(), row_lower.data(),
                     row_upper.data());
  for (int j = 0; j < n; ++j)
    if (problem.integer[j]) solver.setInteger(j);
  // CBC checks its limit between its own stages; Clp's also stops the root LP. Both on the wall clock: CPU
  // seconds would also count the training threads of a rank planning ahead, and stop the solver early.
  solver.getModelPtr()->setMaximumWallSeconds(time_limit_seconds);

  CbcModel model(solver);
  model.setLogLevel(0);
  model.messageHandler()->setLogLevel(0);
  model.setNumberThreads(0);
  model.setUseElapsedTime(true);
  model.setAllowableFractionGap(1e-6);
  CbcStrategyDefault strategy(1, 5, 5);
  model.setStrategy(strategy);
  double start_value = kMilpInfinity;
  if (!start.empty()) {
    start_value = 0.0;
    for (int j = 0; j < n; ++j) start_value += problem.objective[j] * start[j];
    model.setBestSolution(start.data(), n, start_value, false);  // feasible by the caller's construction
  }
  model.setMaximumSeconds(std::max(1e-3, time_limit_seconds - elapsed()));
  model.branchAndBound();

  MilpSolution out;
  if (const double* best = model.bestSolution()) {
    out.x.assign(best, best + n);
    out.objective = 0.0;
    for (int j = 0; j < n; ++j) out.objective += problem.objective[j] * out.x[j];
  }
  const double bound = model.getBestPossibleObjValue();
  // A bound the solver never computed (stopped in the root LP) is reported as none.
  if (std::isfinite(bound) && std::abs(bound) < 1e40 && bound <= out.objective * (1.0 + 1e-9))
    out.bound = bound;
  if (out.x.empty()) {
    out.status = MilpStatus::no_solution;
  } else if (model.isProvenOptimal() && !model.isSecondsLimitReached()) {
    out.status = MilpStatus::optimal;
  } else {
    out.status = MilpStatus::time_limit;
  }
  out.seconds = elapsed();
  return out;
}

#else

bool milp_solver_available() { return false; }

MilpSolution solve_milp(const MilpProblem&, const std::vector<double>&, double) { return {}; }

#endif

}  // namespace minimllm::planning
