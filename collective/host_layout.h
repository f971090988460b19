// Global ranks when a daemon serves several local ranks (docs/architecture.md §6.4, the two-level
// scheme). Ranks are host-major: host 0's local ranks come first, then host 1's, and so on, so a
// host's ranks are contiguous, as torchrun numbers them. Hosts may serve different numbers of
// ranks.
#pragma once

#include <string>
#include <vector>

#include "collective/status.h"
#include "config/knobs.h"

namespace gradsync {

// No daemon serves more ranks (gradsyncd worker --local-ranks).
inline constexpr int kMaxLocalRanks = knobs::kLocalRanks.max;

class HostLayout {
 public:
  HostLayout() = default;
  // `local_ranks[h]` is how many ranks host h serves; none of it may be below 1.
  explicit HostLayout(std::vector<int> local_ranks);
  // One rank per host.
  static HostLayout flat(int hosts);
  // `hosts` hosts serving `local_ranks` ranks each, as a plan lists them (empty: one each).
  static HostLayout of_plan(int hosts, std::vector<int> local_ranks);

  int hosts() const { return static_cast<int>(local_ranks_.size()); }
  int world_size() const { return world_size_; }
  int local_ranks(int host) const { return local_ranks_[host]; }
  int most_local_ranks() const { return most_local_ranks_; }
  int first_rank(int host) const { return first_rank_[host]; }
  int host_of(int rank) const;
  bool flat() const { return most_local_ranks_ <= 1; }
  const std::vector<int>& by_host() const { return local_ranks_; }
  // "4 hosts x 2 local ranks", or "3 hosts x 1, 2, 2 local ranks" where they differ.
  std::string describe() const;

  friend bool operator==(const HostLayout&, const HostLayout&) = default;

 private:
  std::vector<int> local_ranks_;
  std::vector<int> first_rank_;
  int world_size_ = 0;
  int most_local_ranks_ = 0;
};

// Whether `local_ranks` (by host) is a layout: every entry from 1 to kMaxLocalRanks, and no more
// ranks in all than a group may have; the error says which entry is wrong.
Status check_layout(const std::vector<int>& local_ranks);

}  // namespace gradsync
