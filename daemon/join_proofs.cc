#include "daemon/join_proofs.h"

namespace gradsync::daemon {

namespace {

// The running generation a join asks to keep (empty when it asks for none): its place and every
// peer's address.
std::string running_field(const proto::JoinRequest& join) {
  if (!join.has_running()) return {};
  const proto::Assignment& running = join.running();
  std::string field = net::proof_field(running.generation()) +
                      net::proof_field(static_cast<std::uint64_t>(running.rank())) +
                      net::proof_field(static_cast<std::uint64_t>(running.world_size()));
  for (const proto::Peer& peer : running.peers()) {
    field += net::proof_field(static_cast<std::uint64_t>(peer.rank())) +
             net::proof_field(peer.data_address().size()) + peer.data_address();
  }
  return field;
}

}  // namespace

std::string join_proof(const net::GroupSecret& secret, std::string_view challenge,
                       const proto::JoinRequest& join) {
  return secret.prove("gradsync join",
                      {challenge, join.nonce(), join.data_address(),
                       net::proof_field(static_cast<std::uint64_t>(join.requested_rank())),
                       net::proof_field(static_cast<std::uint64_t>(join.previous_rank())),
                       running_field(join), net::proof_field(join.spare_renewal_ms())});
}

std::string assignment_proof(const net::GroupSecret& secret, std::string_view challenge,
                             std::string_view worker_nonce, const proto::Assignment& assignment) {
  return secret.prove("gradsync assignment",
                      {challenge, worker_nonce, net::proof_field(assignment.generation()),
                       net::proof_field(static_cast<std::uint64_t>(assignment.rank())),
                       net::proof_field(static_cast<std::uint64_t>(assignment.world_size()))});
}

std::string spare_proof(const net::GroupSecret& secret, std::string_view challenge,
                        std::string_view worker_nonce, const proto::Spare& spare) {
  return secret.prove("gradsync spare",
                      {challenge, worker_nonce, net::proof_field(spare.renewal()), spare.why()});
}

std::string abort_proof(const net::GroupSecret& secret, std::string_view challenge,
                        std::string_view worker_nonce, const proto::Abort& abort) {
  std::string lost_ranks = net::proof_field(static_cast<std::uint64_t>(abort.lost_ranks_size()));
  for (const int rank : abort.lost_ranks()) {
    lost_ranks += net::proof_field(static_cast<std::uint64_t>(rank));
  }
  return secret.prove("gradsync abort",
                      {challenge, worker_nonce, net::proof_field(abort.generation()), lost_ranks,
                       net::proof_field(static_cast<std::uint64_t>(abort.reason().code())),
                       abort.reason().message()});
}

}  // namespace gradsync::daemon
