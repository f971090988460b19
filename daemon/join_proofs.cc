#include "daemon/join_proofs.h"

namespace gradsync::daemon {

std::string join_proof(const net::GroupSecret& secret, std::string_view challenge,
                       const proto::JoinRequest& join) {
  return secret.prove("gradsync join",
                      {challenge, join.nonce(), join.data_address(),
                       net::proof_field(static_cast<std::uint64_t>(join.requested_rank())),
                       net::proof_field(static_cast<std::uint64_t>(join.previous_rank()))});
}

std::string assignment_proof(const net::GroupSecret& secret, std::string_view challenge,
                             std::string_view worker_nonce, const proto::Assignment& assignment) {
  return secret.prove("gradsync assignment",
                      {challenge, worker_nonce, net::proof_field(assignment.generation()),
                       net::proof_field(static_cast<std::uint64_t>(assignment.rank())),
                       net::proof_field(static_cast<std::uint64_t>(assignment.world_size()))});
}

}  // namespace gradsync::daemon
