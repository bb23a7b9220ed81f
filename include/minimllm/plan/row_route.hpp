// RowRoute: which rows one rank sends to and receives from every other rank (the boundary exchange).
#pragma once

#include <vector>

namespace minimllm {

// What this rank sends and receives, in rows. Rows for destination rank d are send_rows[send_offset(d)
// .. + send_counts[d]); the receiver stores the rows from source s, in the same order, at
// recv_rows[recv_offset(s) .. + recv_counts[s]). Every source row is sent to exactly one destination.
struct RowRoute {
  std::vector<int> send_counts, send_rows;  // send_counts: one per world rank
  std::vector<int> recv_counts, recv_rows;  // recv_counts: one per world rank
};

}  // namespace minimllm
