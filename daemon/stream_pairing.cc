#include "daemon/stream_pairing.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <ctime>

#include "collective/math_util.h"
#include "collective/subgroup.h"
#include "config/knobs.h"
#include "engine/peer_mesh.h"

namespace gradsync::daemon {

namespace {

std::string clock_time(std::chrono::system_clock::time_point when) {
  const std::time_t seconds = std::chrono::system_clock::to_time_t(when);
  std::tm local{};
  ::localtime_r(&seconds, &local);
  char text[16];
  std::strftime(text, sizeof text, "%H:%M:%S", &local);
  return text;
}

std::string describe(const StreamName& stream) {
  return "stream '" + stream.stream + "' of job '" + stream.job + "'";
}

}  // namespace

std::uint64_t name_tag(std::string_view name) {
  const std::uint64_t tag = fnv1a(name.data(), name.size());
  return tag == 0 ? 1 : tag;
}

engine::OpKey StreamName::key(std::uint64_t place, std::uint64_t client) const {
  // The tag of the stream's first client is its name's.
  return {name_tag(job), name_tag(stream) + (client > 1 ? (client - 1) * 0x9e3779b97f4a7c15ull : 0),
          place};
}

bool StreamPairing::Stream::every_local_waits() const {
  return std::all_of(order.begin(), order.end(),
                     [&](int local) { return !locals[local].waiting.empty(); });
}

bool StreamPairing::Stream::some_local_waits() const {
  return std::any_of(order.begin(), order.end(),
                     [&](int local) { return !locals[local].waiting.empty(); });
}

std::vector<int> StreamPairing::locals_of(const Stream& stream) const {
  if (!stream.members.empty()) return members_on_host(stream.members, first_rank_, local_ranks_);
  std::vector<int> every(static_cast<std::size_t>(local_ranks_));
  for (int local = 0; local < local_ranks_; ++local) every[local] = local;
  return every;
}

StreamPairing::StreamPairing(int local_ranks, int first_rank, int host)
    : local_ranks_(std::max(local_ranks, 1)), first_rank_(first_rank), host_(host) {}

std::string StreamPairing::name_of(int local_rank) const {
  return "local rank " + std::to_string(local_rank) + " (rank " +
         std::to_string(first_rank_ + local_rank) + ")";
}

Status StreamPairing::claim(int local_rank, ClientId client, int pid, const StreamName& name,
                            const std::vector<int>& members) {
  if (const auto found = claims_.find(client); found != claims_.end()) {
    if (found->second.stream == name && found->second.local_rank == local_rank) return {};
    return Status(ErrorCode::invalid_argument,
                  "the client submits to " + describe(found->second.stream) + " as " +
                      name_of(found->second.local_rank) + " and cannot change");
  }
  const int rank = first_rank_ + local_rank;
  if (holder_ && holder_->job != name.job) {
    return Status(ErrorCode::mismatch,
                  "rank " + std::to_string(rank) + " (host " + std::to_string(host_) +
                      ") serves job '" + holder_->job + "' (its first client: pid " +
                      std::to_string(holder_->pid) + ", since " + clock_time(holder_->since) +
                      "), not job '" + name.job + "' (pid " + std::to_string(pid) +
                      "): a daemon serves one job at a time, until every client of that job "
                      "has left");
  }
  const auto existing = streams_.find(name);
  if (existing != streams_.end() && existing->second.members != members) {
    return Status(ErrorCode::invalid_argument,
                  "rank " + std::to_string(rank) + "'s client names " +
                      (members.empty() ? "every rank" : "subgroup " + describe_members(members)) +
                      " for " + describe(name) + ", whose other clients here named " +
                      (existing->second.members.empty()
                           ? std::string("every rank")
                           : "subgroup " + describe_members(existing->second.members)));
  }
  Stream& stream = streams_[name];
  if (existing == streams_.end()) {
    stream.locals.resize(static_cast<std::size_t>(local_ranks_));
    stream.members = members;
    stream.order = locals_of(stream);
  }
  if (std::find(stream.order.begin(), stream.order.end(), local_rank) == stream.order.end()) {
    if (existing == streams_.end()) streams_.erase(name);
    return Status(ErrorCode::invalid_argument,
                  "rank " + std::to_string(rank) + " is not a member of subgroup " +
                      describe_members(members) + ", which its client's " + describe(name) +
                      " runs over");
  }
  LocalStream& local = stream.locals[local_rank];
  if (local.submitter) {
    return Status(ErrorCode::invalid_argument,
                  "rank " + std::to_string(rank) + " already has a submitting client of " +
                      describe(name) + " (pid " + std::to_string(local.submitter_pid) + ", since " +
                      clock_time(local.submitter_since) +
                      "); each client of a job submits a stream of its own: name one "
                      "(the client's stream argument)");
  }
  if (!holder_) {
    holder_ = Holder{name.job, pid, std::chrono::system_clock::now()};
    spdlog::info("rank {}: serving job '{}' (its first client: pid {})", rank, name.job, pid);
  }
  const NumberedStream numbered{name, local_rank};
  auto [last, first_time] = client_numbers_.try_emplace(numbered, 0);
  if (first_time) {
    numbered_by_age_.push_back(numbered);
    if (numbered_by_age_.size() > engine::kMaxStreamsKept) {
      client_numbers_.erase(numbered_by_age_.front());
      numbered_by_age_.pop_front();
    }
  }
  local.submitter = client;
  local.last_place = 0;
  if (local.left) local.owed.clear();
  local.left = false;
  local.submitter_pid = pid;
  local.submitter_since = std::chrono::system_clock::now();
  claims_[client] = Claim{name, local_rank, ++last->second};
  return {};
}

engine::OpKey StreamPairing::key_of(ClientId client, std::uint64_t place) const {
  const Claim& claim = claims_.at(client);
  return claim.stream.key(place, claim.number);
}

void StreamPairing::submit(PendingOp op) {
  const Claim& claim = claims_.at(op.client);
  Stream& stream = streams_.at(claim.stream);
  LocalStream& local = stream.locals[claim.local_rank];
  local.last_place = op.key.place;
  if (!local.owed.empty()) {
    Status owed = std::move(local.owed.front());
    local.owed.pop_front();
    fail(std::move(op), std::move(owed));
    return;
  }
  local.waiting.push_back(std::move(op));
  run_complete_places(stream);
}

std::vector<Leaver> StreamPairing::left(ClientId client) {
  const auto found = claims_.find(client);
  if (found == claims_.end()) return {};
  const Claim claim = found->second;
  claims_.erase(found);
  Stream& stream = streams_.at(claim.stream);
  LocalStream& local = stream.locals[claim.local_rank];
  const std::string rank = std::to_string(first_rank_ + claim.local_rank);
  spdlog::info("rank {}: the client (pid {}) of {} left", rank, local.submitter_pid,
               describe(claim.stream));
  PairingAction ended;
  ended.kind = PairingAction::Kind::stream_ended;
  ended.stream = claim.stream.key(local.last_place, claim.number);
  ended.why = Status(ErrorCode::aborted, "rank " + rank + "'s client (pid " +
                                             std::to_string(local.submitter_pid) + ") of " +
                                             describe(claim.stream) + " left");
  actions_.push_back(std::move(ended));
  local.submitter.reset();
  local.left = true;
  std::vector<Leaver> holding_up;
  // The other local ranks' ops that wait for one of its own fail now, not at their timeout.
  if (local.waiting.empty() && stream.some_local_waits()) {
    holding_up.push_back(Leaver{claim.stream, claim.local_rank, local.submitter_pid});
  }
  if (claims_.empty()) end_job();
  return holding_up;
}

void StreamPairing::fail_place_left(const Leaver& leaver) {
  const auto found = streams_.find(leaver.stream);
  if (found == streams_.end() || found->second.locals[leaver.local_rank].submitter) return;
  fail_incomplete(
      found->second, ErrorCode::aborted,
      "left (its client, pid " + std::to_string(leaver.pid) + ", went) before submitting it");
}

void StreamPairing::end_job() {
  spdlog::info("rank {}: job '{}' has no client left here", first_rank_, holder_->job);
  // Its ops that waited for a local rank that will not come fail now: nobody is left to answer,
  // but their places must not outlive the job.
  for (auto& [name, stream] : streams_) {
    fail_incomplete(stream, ErrorCode::aborted, "left with its job");
  }
  streams_.clear();
  holder_.reset();
}

void StreamPairing::new_generation(int first_rank, int host, std::uint64_t generation) {
  first_rank_ = first_rank;
  host_ = host;
  // Places start again in the new generation, and so do client numbers: a client that stays is
  // the first of its stream, as a client that replaces a lost one elsewhere will be.
  client_numbers_.clear();
  numbered_by_age_.clear();
  for (auto& [client, claim] : claims_) {
    claim.number = 1;
    const NumberedStream numbered{claim.stream, claim.local_rank};
    client_numbers_[numbered] = 1;
    numbered_by_age_.push_back(numbered);
  }
  // An op that waited for the other local ranks' fails: its place belonged to the generation
  // before, and the clients' places start again once they take note of the new one.
  for (auto& [name, stream] : streams_) {
    ++stream.places;
    stream.deadline.reset();
    stream.order = locals_of(stream);
    for (LocalStream& local : stream.locals) {
      local.owed.clear();
      local.left = false;
      for (PendingOp& op : std::exchange(local.waiting, {})) {
        fail(std::move(op), Status(ErrorCode::group_changed,
                                   "the group moved to generation " + std::to_string(generation) +
                                       " while this op waited for the other local ranks'"));
      }
    }
  }
}

void StreamPairing::start_waiting(TimePoint now) {
  for (auto& [name, stream] : streams_) {
    if (!stream.some_local_waits() || stream.waiting_since_place == stream.places) continue;
    stream.waiting_since_place = stream.places;
    std::uint32_t timeout_ms = 0;
    for (const LocalStream& local : stream.locals) {
      if (!local.waiting.empty()) timeout_ms = local.waiting.front().op.timeout_ms();
    }
    if (timeout_ms == 0) timeout_ms = knobs::kOpTimeoutMs.default_value;
    stream.wait_ms = timeout_ms;
    stream.deadline = now + std::chrono::milliseconds(timeout_ms);
  }
}

std::optional<StreamPairing::TimePoint> StreamPairing::deadline() const {
  std::optional<TimePoint> first;
  for (const auto& [name, stream] : streams_) {
    if (stream.deadline && (!first || *stream.deadline < *first)) first = stream.deadline;
  }
  return first;
}

void StreamPairing::tick(TimePoint now) {
  for (auto& [name, stream] : streams_) {
    if (!stream.deadline || now < *stream.deadline) continue;
    stream.deadline.reset();
    fail_incomplete(stream, ErrorCode::deadline_exceeded,
                    "submitted no op within " + std::to_string(stream.wait_ms) +
                        " ms of the other local ranks");
  }
}

std::vector<PairingAction> StreamPairing::take_actions() {
  std::vector<PairingAction> actions = std::exchange(actions_, {});
  std::vector<std::size_t> runs;
  for (std::size_t index = 0; index < actions.size(); ++index) {
    if (actions[index].kind == PairingAction::Kind::run) runs.push_back(index);
  }
  const auto submitted = [](const PairingAction& action) {
    return action.place.ops.empty() ? 0 : action.place.ops.front().op.process_order();
  };
  std::vector<PairingAction> ordered;
  for (const std::size_t index : runs) ordered.push_back(std::move(actions[index]));
  std::stable_sort(ordered.begin(), ordered.end(),
                   [&](const PairingAction& left, const PairingAction& right) {
                     return submitted(left) < submitted(right);
                   });
  for (std::size_t slot = 0; slot < runs.size(); ++slot) {
    actions[runs[slot]] = std::move(ordered[slot]);
  }
  return actions;
}

void StreamPairing::run_complete_places(Stream& stream) {
  while (stream.every_local_waits()) {
    PairingAction action;
    for (const int index : stream.order) {
      LocalStream& local = stream.locals[index];
      action.place.ops.push_back(std::move(local.waiting.front()));
      local.waiting.pop_front();
    }
    action.place.members = stream.members;
    ++stream.places;
    stream.deadline.reset();
    actions_.push_back(std::move(action));
  }
}

void StreamPairing::fail_incomplete(Stream& stream, ErrorCode code, const std::string& why) {
  if (stream.every_local_waits() || !stream.some_local_waits()) return;
  PairingAction action;
  LocalOps& place = action.place;
  std::string missing;
  std::vector<int> late;
  place.members = stream.members;
  for (const int index : stream.order) {
    LocalStream& local = stream.locals[index];
    if (local.waiting.empty()) {
      missing += (missing.empty() ? "" : ", ") + name_of(index);
      late.push_back(index);
      continue;
    }
    place.ops.push_back(std::move(local.waiting.front()));
    local.waiting.pop_front();
  }
  const std::uint64_t sequence = place.ops.front().key.place;
  place.missing = Status(code, "op " + std::to_string(sequence) + " of the streams of host " +
                                   std::to_string(host_) + ": " + missing + " " + why);
  for (const int index : late) {
    if (stream.locals[index].left) continue;
    stream.locals[index].owed.push_back(Status(
        code, "this op's place failed on every rank without it: " + place.missing.message()));
  }
  ++stream.places;
  stream.deadline.reset();
  actions_.push_back(std::move(action));
}

void StreamPairing::fail(PendingOp op, Status why) {
  PairingAction action;
  action.kind = PairingAction::Kind::fail;
  action.op = std::move(op);
  action.why = std::move(why);
  actions_.push_back(std::move(action));
}

}  // namespace gradsync::daemon
