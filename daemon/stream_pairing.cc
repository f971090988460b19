#include "daemon/stream_pairing.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <ctime>

#include "config/knobs.h"

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

}  // namespace

StreamPairing::StreamPairing(int local_ranks, int first_rank, int host)
    : streams_(static_cast<std::size_t>(std::max(local_ranks, 1))),
      first_rank_(first_rank),
      host_(host) {}

std::string StreamPairing::name_of(int local_rank) const {
  return "local rank " + std::to_string(local_rank) + " (rank " +
         std::to_string(first_rank_ + local_rank) + ")";
}

Status StreamPairing::claim(int local_rank, ClientId client, int pid) {
  LocalStream& stream = streams_[local_rank];
  if (stream.submitter == client) return {};
  const int rank = first_rank_ + local_rank;
  if (stream.submitter) {
    return Status(ErrorCode::invalid_argument,
                  "rank " + std::to_string(rank) + " already has a submitting client (pid " +
                      std::to_string(stream.submitter_pid) + ", since " +
                      clock_time(stream.submitter_since) +
                      "); a rank takes ops from one client at a time, so that every rank "
                      "pairs the same ops");
  }
  stream.submitter = client;
  stream.submitted = 0;
  if (stream.left) stream.owed.clear();
  stream.left = false;
  stream.submitter_pid = pid;
  stream.submitter_since = std::chrono::system_clock::now();
  spdlog::info("rank {}: ops now come from the client with pid {}", rank, pid);
  return {};
}

std::optional<ClientId> StreamPairing::submitter(int local_rank) const {
  return streams_[local_rank].submitter;
}

int StreamPairing::submitter_pid(int local_rank) const {
  const LocalStream& stream = streams_[local_rank];
  return stream.submitter ? stream.submitter_pid : 0;
}

void StreamPairing::submit(PendingOp op) {
  LocalStream& stream = streams_[op.local_rank];
  op.stream_sequence = ++stream.submitted;
  if (!stream.owed.empty()) {
    Status owed = std::move(stream.owed.front());
    stream.owed.pop_front();
    fail(std::move(op), std::move(owed));
    return;
  }
  stream.waiting.push_back(std::move(op));
  run_complete_places();
}

std::vector<Leaver> StreamPairing::left(ClientId client) {
  std::vector<Leaver> holding_up;
  for (int index = 0; index < local_ranks(); ++index) {
    LocalStream& stream = streams_[index];
    if (stream.submitter != client) continue;
    spdlog::info("rank {}: the submitting client (pid {}) left", first_rank_ + index,
                 stream.submitter_pid);
    stream.submitter.reset();
    stream.left = true;
    // The other local ranks' ops that wait for one of its own fail now, not at their timeout.
    if (stream.waiting.empty() && some_stream_waits()) {
      holding_up.push_back(Leaver{index, stream.submitter_pid});
    }
  }
  return holding_up;
}

void StreamPairing::fail_place_left(const Leaver& leaver) {
  if (streams_[leaver.local_rank].submitter) return;
  fail_incomplete(ErrorCode::aborted, "left (its client, pid " + std::to_string(leaver.pid) +
                                          ", went) before submitting it");
}

void StreamPairing::new_generation(int first_rank, int host, std::uint64_t generation) {
  first_rank_ = first_rank;
  host_ = host;
  // The submitting clients' streams start again: ops pair by their place in them. An op that
  // waited for the other local ranks' fails: its place belonged to the generation before.
  ++places_;
  deadline_.reset();
  for (LocalStream& stream : streams_) {
    stream.submitted = 0;
    stream.owed.clear();
    stream.left = false;
    for (PendingOp& op : std::exchange(stream.waiting, {})) {
      fail(std::move(op), Status(ErrorCode::group_changed,
                                 "the group moved to generation " + std::to_string(generation) +
                                     " while this op waited for the other local ranks'"));
    }
  }
}

void StreamPairing::start_waiting(TimePoint now) {
  if (!some_stream_waits() || waiting_since_place_ == places_) return;
  waiting_since_place_ = places_;
  std::uint32_t timeout_ms = 0;
  for (const LocalStream& stream : streams_) {
    if (!stream.waiting.empty()) timeout_ms = stream.waiting.front().op.timeout_ms();
  }
  if (timeout_ms == 0) timeout_ms = knobs::kOpTimeoutMs.default_value;
  wait_ms_ = timeout_ms;
  deadline_ = now + std::chrono::milliseconds(timeout_ms);
}

void StreamPairing::tick(TimePoint now) {
  if (!deadline_ || now < *deadline_) return;
  deadline_.reset();
  fail_incomplete(ErrorCode::deadline_exceeded, "submitted no op within " +
                                                    std::to_string(wait_ms_) +
                                                    " ms of the other local ranks");
}

bool StreamPairing::every_stream_waits() const {
  return std::all_of(streams_.begin(), streams_.end(),
                     [](const LocalStream& stream) { return !stream.waiting.empty(); });
}

bool StreamPairing::some_stream_waits() const {
  return std::any_of(streams_.begin(), streams_.end(),
                     [](const LocalStream& stream) { return !stream.waiting.empty(); });
}

void StreamPairing::run_complete_places() {
  while (every_stream_waits()) {
    PairingAction action;
    for (LocalStream& stream : streams_) {
      action.place.ops.push_back(std::move(stream.waiting.front()));
      stream.waiting.pop_front();
    }
    ++places_;
    deadline_.reset();
    actions_.push_back(std::move(action));
  }
}

void StreamPairing::fail_incomplete(ErrorCode code, const std::string& why) {
  if (every_stream_waits() || !some_stream_waits()) return;
  PairingAction action;
  LocalOps& place = action.place;
  std::string missing;
  std::vector<int> late;
  for (int index = 0; index < local_ranks(); ++index) {
    LocalStream& stream = streams_[index];
    if (stream.waiting.empty()) {
      missing += (missing.empty() ? "" : ", ") + name_of(index);
      late.push_back(index);
      continue;
    }
    place.ops.push_back(std::move(stream.waiting.front()));
    stream.waiting.pop_front();
  }
  const std::uint64_t sequence = place.ops.front().stream_sequence;
  place.missing = Status(code, "op " + std::to_string(sequence) + " of the streams of host " +
                                   std::to_string(host_) + ": " + missing + " " + why);
  for (const int index : late) {
    if (streams_[index].left) continue;
    streams_[index].owed.push_back(Status(
        code, "this op's place failed on every rank without it: " + place.missing.message()));
  }
  ++places_;
  deadline_.reset();
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
