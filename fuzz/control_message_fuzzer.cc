// Every control message a daemon receives, as arbitrary bytes: parsed as a worker's message and
// handed to the coordinator's membership state machine as a stranger's first message, and as a
// member's message once a group of two (with a secret) has formed, then the clock runs out; and
// parsed as a coordinator's message, whose assignment and plan a worker checks, and which a worker
// with a secret takes as the answer to its join. Nothing may crash, a group with a secret admits
// nobody who cannot prove it, and a worker with a secret takes no answer (an assignment, word that
// it is a spare, an abort) from a coordinator that cannot.
#include <google/protobuf/stubs/logging.h>
#include <spdlog/spdlog.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "daemon/join_handshake.h"
#include "daemon/join_proofs.h"
#include "daemon/membership.h"
#include "daemon/mesh_plan.h"
#include "proto/convert.h"

namespace {

using namespace gradsync;
using namespace gradsync::daemon;

std::string challenge_of(Membership& membership, ConnectionId id) {
  for (const Action& action : membership.take_actions()) {
    if (action.connection == id && action.message.has_challenge()) {
      return action.message.challenge().nonce();
    }
  }
  return "";
}

void join(Membership& membership, ConnectionId id, const net::GroupSecret& secret, TimePoint now) {
  membership.connected(id, "10.0.0.1:1", now);
  const std::string challenge = challenge_of(membership, id);
  proto::WorkerToCoordinator message;
  proto::JoinRequest& request = *message.mutable_join();
  request.set_data_address("10.0.0." + std::to_string(id) + ":5000");
  request.set_requested_rank(-1);
  request.set_nonce("worker nonce");
  request.set_challenge_response(join_proof(secret, challenge, request));
  membership.received(id, message, now);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::off);  // a refusal is logged; a million of them would be slow
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const net::GroupSecret secret(std::string(32, 's'));
  proto::CoordinatorToWorker from_coordinator;
  if (from_coordinator.ParseFromArray(data, static_cast<int>(size))) {
    JoinSettings settings;
    settings.coordinator = "10.0.0.1:7000";
    settings.secret = secret;
    settings.join_timeout = std::chrono::milliseconds(60'000);
    JoinHandshake handshake = JoinHandshake::to_form(settings, -1);
    proto::CoordinatorToWorker challenge;
    challenge.mutable_challenge()->set_nonce("the coordinator's nonce");
    proto::WorkerToCoordinator join;
    (void)handshake.challenged(challenge, "10.0.0.2", 7100, join);  // the join's nonce is fresh
    if (handshake.answered(from_coordinator).ok() || handshake.ended()) __builtin_trap();
    GroupPlan plan;
    if (from_coordinator.has_plan()) (void)from_proto(from_coordinator.plan(), plan);
    MeshPlan mesh;
    if (from_coordinator.has_assignment() &&
        mesh_plan_from(from_coordinator.assignment(), mesh).ok() &&
        mesh.peers.size() != static_cast<std::size_t>(mesh.world_size)) {
      __builtin_trap();
    }
  }
  proto::WorkerToCoordinator message;
  if (!message.ParseFromArray(data, static_cast<int>(size))) return 0;
  MembershipConfig config;
  config.world_size = 2;
  config.network = NetworkModel::uniform(10.0, 0.001);
  config.calibration_budget = std::chrono::milliseconds(0);
  config.secret = secret;
  TimePoint now{std::chrono::seconds(1000)};
  Membership membership(config);
  // A stranger's first message: it cannot prove a secret it does not have.
  membership.connected(7, "stranger", now);
  membership.received(7, message, now);
  if (membership.members() != 0) __builtin_trap();
  join(membership, 1, secret, now);
  join(membership, 2, secret, now);
  membership.take_actions();
  membership.received(1, message, now);
  membership.take_actions();
  now += std::chrono::seconds(60);
  membership.tick(now);
  membership.take_actions();
  return 0;
}
