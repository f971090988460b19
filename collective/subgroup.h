// A collective over an ordered subset of a group's ranks (docs/architecture.md §6.5). Its members,
// as global ranks in the order that makes them the subgroup's ranks 0, 1, …, name it on every host
// alike. It runs as an op between the hosts its members are on, in the order of their members,
// with each host's members as that host's local ranks: the two-level scheme of host_layout.h over
// a smaller layout. That needs each host's members adjacent in the order; every ascending list
// (torch's new_group sorts its ranks) and every list of one rank per host is.
#pragma once

#include <string>
#include <vector>

#include "collective/cost_model.h"
#include "collective/host_layout.h"
#include "collective/schedule.h"
#include "collective/status.h"

namespace gradsync {

struct Subgroup {
  HostLayout layout;            // its hosts, each with its members, in its order
  std::vector<int> host_ranks;  // each of its hosts' rank in the group
  int position = -1;            // the asking host's place among its hosts; -1: not one
  std::vector<int> locals;      // the asking host's members' local ranks, in its order
};

// Checks `members` against `group` (at least one, each a rank of the group, none twice, each host's
// adjacent) and fills `subgroup` as host `host` sees it; the error names the member that is wrong.
Status plan_subgroup(const HostLayout& group, const std::vector<int>& members, int host,
                     Subgroup& subgroup);

// The members of one host, `first_rank` to first_rank + local_ranks - 1, as its local ranks in the
// subgroup's order.
std::vector<int> members_on_host(const std::vector<int>& members, int first_rank, int local_ranks);

// A subgroup's schedule with its ranks named as the group names them: `ranks[r]` is the group's
// rank of the subgroup's rank r.
Schedule on_group_ranks(const Schedule& schedule, const std::vector<int>& ranks);

// `network` (of a group's hosts) as the links between `host_ranks` (a subgroup's hosts) are.
NetworkModel subgroup_network(const NetworkModel& network, const std::vector<int>& host_ranks);

// "[0, 2, 5]"
std::string describe_members(const std::vector<int>& members);

}  // namespace gradsync
