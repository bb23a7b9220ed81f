// A mixed-integer linear programme and its solution by COIN-OR CBC under a wall-clock time limit
// (internal). Built without CBC (MINIMLLM_HAVE_CBC undefined: CMake did not find pkg-config's `cbc`),
// solve_milp reports MilpStatus::unavailable and the callers keep their heuristics.
#pragma once

#include <limits>
#include <vector>

namespace minimllm::planning {

inline constexpr double kMilpInfinity = std::numeric_limits<double>::infinity();

// minimise objective . x  subject to  row_lower <= A x <= row_upper,  col_lower <= x <= col_upper,
// x_j integer where integer[j]. A is given as (row, column, value) entries.
struct MilpProblem {
  std::vector<double> col_lower, col_upper, objective;
  std::vector<char> integer;
  std::vector<double> row_lower, row_upper;
  std::vector<int> entry_row, entry_col;
  std::vector<double> entry_value;

  int add_column(double lower, double upper, double cost, bool is_integer);
  int add_row(double lower, double upper);
  void add_entry(int row, int col, double value);
  int columns() const { return static_cast<int>(objective.size()); }
  int rows() const { return static_cast<int>(row_lower.size()); }
};

enum class MilpStatus {
  optimal,      // proven optimal (within a relative gap of 1e-6)
  time_limit,   // stopped at the time limit with a solution (possibly the start), not proven optimal
  no_solution,  // stopped at the time limit, or infeasible, without any solution
  too_large,    // not attempted: the model is too large for the time limit (the caller's rule)
  unavailable,  // built without a MILP solver
};
const char* to_string(MilpStatus status);

struct MilpSolution {
  MilpStatus status = MilpStatus::unavailable;
  std::vector<double> x;  // the best solution found; empty when none
  double objective = kMilpInfinity;
  double bound = -kMilpInfinity;  // the solver's best lower bound on the optimum
  double seconds = 0.0;           // wall time of the solve (building the solver's model included)
  // (objective - bound) / |objective|: 0 when proven optimal; +inf without a solution or a bound.
  double gap() const;
};

// Whether solve_milp can solve (this build has CBC).
bool milp_solver_available();

// Solves `problem` with CBC (its default cuts and heuristics, one thread, no output) for at most
// time_limit_seconds of wall time. `start`, when not empty, is a feasible point (e.g. a heuristic's
// solution) given to the solver as its first incumbent.
MilpSolution solve_milp(const MilpProblem& problem, const std::vector<double>& start,
                        double time_limit_seconds);

}  // namespace minimllm::planning
