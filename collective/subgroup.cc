#include "collective/subgroup.h"

#include "collective/group_plan.h"

namespace gradsync {

namespace {

Status invalid(const std::vector<int>& members, const std::string& why) {
  return Status(ErrorCode::invalid_argument, "subgroup " + describe_members(members) + ": " + why);
}

}  // namespace

Status plan_subgroup(const HostLayout& group, const std::vector<int>& members, int host,
                     Subgroup& subgroup) {
  subgroup = {};
  if (members.empty()) return invalid(members, "a subgroup has at least one member");
  if (members.size() > static_cast<std::size_t>(kMaxWorldSize)) {
    return invalid(members, "more members than a group may have ranks");
  }
  std::vector<bool> seen(static_cast<std::size_t>(group.world_size()), false);
  std::vector<bool> host_done(static_cast<std::size_t>(group.hosts()), false);
  std::vector<int> counts;
  int last_host = -1;
  for (const int member : members) {
    if (member < 0 || member >= group.world_size()) {
      return invalid(members, "rank " + std::to_string(member) + " is not a rank of a group of " +
                                  std::to_string(group.world_size()));
    }
    if (seen[member]) return invalid(members, "rank " + std::to_string(member) + " is named twice");
    seen[member] = true;
    const int member_host = group.host_of(member);
    if (member_host != last_host) {
      if (host_done[member_host]) {
        return invalid(members, "rank " + std::to_string(member) + " is on host " +
                                    std::to_string(member_host) +
                                    ", whose other members are not beside it in the order: a "
                                    "host's members must be adjacent");
      }
      if (last_host >= 0) host_done[last_host] = true;
      last_host = member_host;
      if (member_host == host) subgroup.position = static_cast<int>(counts.size());
      subgroup.host_ranks.push_back(member_host);
      counts.push_back(0);
    }
    ++counts.back();
  }
  subgroup.layout = HostLayout(std::move(counts));
  if (host >= 0 && host < group.hosts()) {
    subgroup.locals = members_on_host(members, group.first_rank(host), group.local_ranks(host));
  }
  return {};
}

std::vector<int> members_on_host(const std::vector<int>& members, int first_rank, int local_ranks) {
  std::vector<int> locals;
  for (const int member : members) {
    if (member >= first_rank && member < first_rank + local_ranks) {
      locals.push_back(member - first_rank);
    }
  }
  return locals;
}

Schedule on_group_ranks(const Schedule& schedule, const std::vector<int>& ranks) {
  Schedule mapped = schedule;
  mapped.rank = ranks[schedule.rank];
  for (Round& round : mapped.rounds) {
    for (Send& send : round.sends) send.peer = ranks[send.peer];
    for (Recv& recv : round.recvs) recv.peer = ranks[recv.peer];
  }
  return mapped;
}

NetworkModel subgroup_network(const NetworkModel& network, const std::vector<int>& host_ranks) {
  NetworkModel subnetwork = network;
  if (!network.per_link()) return subnetwork;
  subnetwork.world_size = static_cast<int>(host_ranks.size());
  subnetwork.links.clear();
  for (const int from : host_ranks) {
    for (const int to : host_ranks) subnetwork.links.push_back(network.link(from, to));
  }
  return subnetwork;
}

std::string describe_members(const std::vector<int>& members) {
  std::string text = "[";
  for (std::size_t index = 0; index < members.size(); ++index) {
    text += (index > 0 ? ", " : "") + std::to_string(members[index]);
  }
  return text + "]";
}

}  // namespace gradsync
