#include "daemon/mesh_plan.h"

#include <string>

#include "collective/group_plan.h"

namespace gradsync::daemon {

namespace {

Status bad(const std::string& what) {
  return Status(ErrorCode::protocol_error, "the coordinator's assignment " + what);
}

}  // namespace

Status mesh_plan_from(const proto::Assignment& assignment, MeshPlan& plan) {
  const int p = assignment.world_size();
  if (p < 1 || p > kMaxWorldSize) {
    return bad("has a world size of " + std::to_string(p) + ", not 1 to " +
               std::to_string(kMaxWorldSize));
  }
  if (assignment.rank() < 0 || assignment.rank() >= p) {
    return bad("gives this worker rank " + std::to_string(assignment.rank()) + " in a group of " +
               std::to_string(p));
  }
  if (assignment.generation() == 0) return bad("has no generation");
  if (assignment.peers_size() != p) {
    return bad("lists " + std::to_string(assignment.peers_size()) + " peers in a group of " +
               std::to_string(p));
  }
  plan = {assignment.rank(), p, assignment.generation(), std::vector<net::HostPort>(p), {}};
  std::vector<bool> listed(p, false);
  std::vector<int> local_ranks(p, 1);
  for (const proto::Peer& peer : assignment.peers()) {
    const int rank = peer.rank();
    if (rank < 0 || rank >= p || listed[rank]) {
      return bad("lists rank " + std::to_string(rank) +
                 (rank >= 0 && rank < p ? " twice" : ", outside the group"));
    }
    listed[rank] = true;
    if (Status parsed = net::parse_host_port(peer.data_address(), plan.peers[rank]); !parsed.ok()) {
      return bad("gives rank " + std::to_string(rank) + " a bad data address: " + parsed.message());
    }
    local_ranks[rank] = peer.local_ranks() == 0 ? 1 : peer.local_ranks();  // 0: unset
  }
  if (Status layout = check_layout(local_ranks); !layout.ok())
    return bad("is wrong: " + layout.message());
  plan.layout = HostLayout(std::move(local_ranks));
  return {};
}

}  // namespace gradsync::daemon
