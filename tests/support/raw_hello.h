// For tests that speak the client protocol by hand beside the library's clients.
#pragma once

#include "gradsync.pb.h"
#include "client/gradsync_client.h"

namespace gradsync::testing {

// A hello of the job and stream of `partner`, a library client on another rank: ops sent after
// it pair with the partner's.
inline proto::ClientToDaemon hello_pairing_with(const Client& partner) {
  proto::ClientToDaemon hello;
  hello.mutable_hello()->set_job(partner.job());
  hello.mutable_hello()->set_stream(partner.stream());
  return hello;
}

}  // namespace gradsync::testing
