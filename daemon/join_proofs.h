// What a worker and its coordinator prove to each other when the worker joins, with the group
// secret (net/group_secret.h): the worker, that it knows the secret, over the coordinator's
// challenge and its own request; the coordinator, in the assignment, over both nonces and the
// rank and generation it assigns. A replayed request or assignment fails: each side's nonce is
// fresh.
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

}  // namespace gradsync::daemon
