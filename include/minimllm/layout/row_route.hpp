// Which rows of the boundary (item embeddings) a rank sends to and receives from each rank: the plan
// derives it (rank_work.hpp), BoundaryExchange (parallel/boundary_exchange.hpp) carries it out.
#pragma once

#include <vector>

namespace minimllm {

// What this rank sends and receives, in rows. Rows for destination rank d are send_rows[send_offset(d)
// .. + send_counts[d]); the receiver stores the rows from source s, in the same order, at
// recv_rows[recv_offset(s) .. + recv_counts[s]). Every source row is sent to exactly one destination.
struct RowRoute {
  std::vector<int> send_counts, send_rows;  // send_counts: one per rank
  std::vector<int> recv_counts, recv_rows;  // recv_counts: one per rank
};

// Rows [first, first + count).
struct RowRun {
  int first = 0, count = 0;
};

// A RowRoute as runs of consecutive rows: what a plan derives (rank_work.hpp), in O(runs) whatever the
// rows; expanded row by row only where the rows are moved (BoundaryExchange).
struct RunRoute {
  std::vector<int> send_counts, recv_counts;  // rows per rank, as RowRoute's
  std::vector<RowRun> send_runs, recv_runs;   // rank by rank, each rank's rows in order
};

// Appends rows [first, first + count) to `runs`, extending the last run when they follow it.
inline void append_run(std::vector<RowRun>& runs, int first, int count) {
  if (count <= 0) return;
  if (!runs.empty() && runs.back().first + runs.back().count == first)
    runs.back().count += count;
  else
    runs.push_back({first, count});
}

// The route row by row: O(rows).
inline RowRoute expand(const RunRoute& route) {
  const auto rows = [](const std::vector<RowRun>& runs) {
    std::vector<int> out;
    for (const RowRun& run : runs)
      for (int r = 0; r < run.count; ++r) out.push_back(run.first + r);
    return out;
  };
  return {route.send_counts, rows(route.send_runs), route.recv_counts, rows(route.recv_runs)};
}

}  // namespace minimllm
