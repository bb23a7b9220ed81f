#include "minimllm/layout/comm_ledger.hpp"

#include <fmt/format.h>

#include <stdexcept>

namespace minimllm {

CommLedger::CommLedger(int capacity) : capacity_(capacity) {
  if (capacity < 1)
    throw std::invalid_argument(
        fmt::format("CommLedger: capacity {} is invalid; it must be at least 1", capacity));
}

int CommLedger::held(int rank) const {
  const auto found = by_rank_.find(rank);
  return found == by_rank_.end() ? 0 : static_cast<int>(found->second.size());
}

void CommLedger::touch(Group group, std::uint64_t tick) {
  for (int rank : group->first) {
    auto& mine = by_rank_[rank];
    mine.erase({group->second, &group->first});
    mine.insert({tick, &group->first});
  }
  group->second = tick;
}

void CommLedger::evict(Group group) {
  for (int rank : group->first) {
    auto& mine = by_rank_[rank];
    mine.erase({group->second, &group->first});
    if (mine.empty()) by_rank_.erase(rank);
  }
  last_use_.erase(group);
}

CommLedger::Use CommLedger::use(const std::vector<int>& ranks) {
  if (ranks.size() < 2)
    throw std::invalid_argument("CommLedger::use: a group of one rank needs no communicator");
  Use result;
  const std::uint64_t tick = ++clock_;
  if (auto found = last_use_.find(ranks); found != last_use_.end()) {
    result.hit = true;
    touch(found, tick);
    return result;
  }
  // Room on every member first: a member at its cap drops its least recently used group, on every
  // member of that group.
  for (int rank : ranks) {
    while (held(rank) >= capacity_) {
      const std::vector<int>* oldest = by_rank_[rank].begin()->second;
      result.evicted.push_back(*oldest);
      evict(last_use_.find(*oldest));
    }
  }
  const Group created = last_use_.emplace(ranks, 0).first;
  for (int rank : ranks) by_rank_[rank].insert({tick, &created->first});
  created->second = tick;
  return result;
}

std::vector<std::vector<int>> power_of_two_blocks(int ranks, int capacity) {
  std::vector<std::vector<int>> blocks;
  int sizes = 0;
  for (long long size = 2; size <= ranks && sizes < capacity - 1; size *= 2, ++sizes)
    for (long long first = 0; first + size <= ranks; first += size) {
      std::vector<int> block(static_cast<size_t>(size));
      for (long long i = 0; i < size; ++i) block[i] = static_cast<int>(first + i);
      blocks.push_back(std::move(block));
    }
  return blocks;
}

}  // namespace minimllm
