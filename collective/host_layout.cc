#include "collective/host_layout.h"

#include <algorithm>

#include "collective/group_plan.h"

namespace gradsync {

HostLayout::HostLayout(std::vector<int> local_ranks) : local_ranks_(std::move(local_ranks)) {
  for (const int ranks : local_ranks_) {
    first_rank_.push_back(world_size_);
    world_size_ += ranks;
    most_local_ranks_ = std::max(most_local_ranks_, ranks);
  }
}

HostLayout HostLayout::flat(int hosts) { return HostLayout(std::vector<int>(hosts, 1)); }

HostLayout HostLayout::of_plan(int hosts, std::vector<int> local_ranks) {
  return local_ranks.empty() ? flat(hosts) : HostLayout(std::move(local_ranks));
}

int HostLayout::host_of(int rank) const {
  const auto after = std::upper_bound(first_rank_.begin(), first_rank_.end(), rank);
  return static_cast<int>(after - first_rank_.begin()) - 1;
}

std::string HostLayout::describe() const {
  std::string text = std::to_string(hosts()) + (hosts() == 1 ? " host x " : " hosts x ");
  const bool even = std::all_of(local_ranks_.begin(), local_ranks_.end(),
                                [&](int ranks) { return ranks == local_ranks_.front(); });
  if (even) {
    text += std::to_string(local_ranks_.empty() ? 0 : local_ranks_.front());
  } else {
    for (std::size_t host = 0; host < local_ranks_.size(); ++host) {
      text += (host > 0 ? ", " : "") + std::to_string(local_ranks_[host]);
    }
  }
  return text + (even && !local_ranks_.empty() && local_ranks_.front() == 1 ? " local rank"
                                                                            : " local ranks");
}

Status check_layout(const std::vector<int>& local_ranks) {
  long total = 0;
  for (std::size_t host = 0; host < local_ranks.size(); ++host) {
    if (local_ranks[host] < 1 || local_ranks[host] > kMaxLocalRanks) {
      return Status(ErrorCode::invalid_argument, "host " + std::to_string(host) + " serves " +
                                                     std::to_string(local_ranks[host]) +
                                                     " local ranks, not 1 to " +
                                                     std::to_string(kMaxLocalRanks));
    }
    total += local_ranks[host];
  }
  if (total > kMaxWorldSize) {
    return Status(ErrorCode::invalid_argument, std::to_string(total) +
                                                   " ranks in all, more than a group may have (" +
                                                   std::to_string(kMaxWorldSize) + ")");
  }
  return {};
}

}  // namespace gradsync
