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

}  // namespace minimllm
