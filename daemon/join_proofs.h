// What a worker and its coordinator prove to each other when the worker joins, with the group
// secret (net/group_secret.h): the worker, that it knows the secret, over the coordinator's
// challenge and its own request; the coordinator, over both nonces, in every message a worker acts
// on before its assignment has proven the coordinator: the assignment itself (the rank and
// generation it assigns), a Spare (kept waiting) and an Abort (refused, or the group ended). A
// replayed request or answer fails: each side's nonce is fresh, and a Spare's renewal number grows.
#pragma once

#include <string>
#include <string_view>

#include "gradsync.pb.h"
#include "net/group_secret.h"

namespace gradsync::daemon {

std::string join_proof(const net::GroupSecret& secret, std::string_view challenge,
                       const proto::JoinRequest& join);

std::string assignment_proof(const net::GroupSecret& secret, std::string_view challenge,
                             std::string_view worker_nonce, const proto::Assignment& assignment);

std::string spare_proof(const net::GroupSecret& secret, std::string_view challenge,
                        std::string_view worker_nonce, const proto::Spare& spare);

std::string abort_proof(const net::GroupSecret& secret, std::string_view challenge,
                        std::string_view worker_nonce, const proto::Abort& abort);

}  // namespace gradsync::daemon
