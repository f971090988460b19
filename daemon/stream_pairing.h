// Which ops of a daemon's local ranks run together, as a pure state machine: every local rank has
// one op stream at a time, fed by its submitting client, and the ops at the same place of every
// stream run as one op. Events in (a client claims a local rank, submits its next op, leaves; the
// group moves to a new generation; the clock), actions out (run the ops at one place; answer one op
// with a failure). A place that some local ranks have reached and another has not fails on every
// rank once the op's timeout has passed, or at once when the missing rank's client leaves; the
// late rank's own op at that place then fails when it comes. No sockets, no threads, no clock of
// its own: the caller passes the time, so tests drive it with a fake one.
//
// The streams are keyed by local rank; a stream is one object (LocalStream), so that more than one
// stream per local rank would be more keys, not another design.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "collective/status.h"
#include "gradsync.pb.h"
#include "net/shared_memory.h"

namespace gradsync::daemon {

class ClientSession;

struct PendingOp {
  std::shared_ptr<ClientSession> session;  // to answer it; the pairing never looks at it
  proto::SubmitOp op;
  std::shared_ptr<net::SharedRegion> region;  // null for ops without bytes or an unknown region
  std::uint64_t stream_sequence = 0;          // 1 for the submitting client's first op, and so on
  int local_rank = 0;
  bool queued = false;  // it came through the client's op queue: answered there (and a failure's
                        // reason on the socket)
};

// The ops at one place of every local rank's stream, which the worker runs as one op.
struct LocalOps {
  std::vector<PendingOp> ops;  // by local rank; those of `missing` left out
  Status missing;              // why some local rank's op will not come; the op then fails
};

// A client of the daemon, as the server numbers them.
using ClientId = std::uint64_t;

struct PairingAction {
  enum class Kind { run, fail };
  Kind kind = Kind::run;
  LocalOps place;  // run: the ops at one place of the streams
  PendingOp op;    // fail: one op, answered with `why`
  Status why;
};

// A local rank's client that left while the others waited for its op (StreamPairing::left).
struct Leaver {
  int local_rank = 0;
  int pid = 0;
};

class StreamPairing {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  // `local_ranks` streams, of the ranks from `first_rank` on, on host `host`.
  StreamPairing(int local_ranks, int first_rank, int host);

  int local_ranks() const { return static_cast<int>(streams_.size()); }
  // "local rank 1 (rank 5)"
  std::string name_of(int local_rank) const;

  // Makes `client` (process `pid`) the submitting client of `local_rank`, unless another one is.
  Status claim(int local_rank, ClientId client, int pid);
  // The local rank's submitting client, if one is.
  std::optional<ClientId> submitter(int local_rank) const;
  int submitter_pid(int local_rank) const;  // 0 without one

  // The next op of its local rank's stream, from that rank's submitting client: it waits until
  // every local rank has reached its place (or fails, if that place has failed already).
  void submit(PendingOp op);
  // `client` has gone: the local ranks it submitted for have no stream until a client claims
  // them. Returns those for which the others wait: call fail_place_left(), from the event loop's
  // next turn, to fail that place unless another client has claimed the rank by then.
  std::vector<Leaver> left(ClientId client);
  void fail_place_left(const Leaver& leaver);

  // The group moved to `generation`, whose ranks are named from `first_rank` on host `host`:
  // every stream starts again, and an op that waited fails (its place was of the generation
  // before).
  void new_generation(int first_rank, int host, std::uint64_t generation);

  // Once the actions are done: a place that some local ranks have reached waits from `now` on, as
  // long as its op's timeout.
  void start_waiting(TimePoint now);
  // When tick() fails that place; nullopt while none waits.
  std::optional<TimePoint> deadline() const { return deadline_; }
  void tick(TimePoint now);

  // The actions since the last call, in order.
  std::vector<PairingAction> take_actions() { return std::exchange(actions_, {}); }

 private:
  // One local rank's op stream.
  struct LocalStream {
    std::optional<ClientId> submitter;
    int submitter_pid = 0;
    std::chrono::system_clock::time_point submitter_since;
    std::uint64_t submitted = 0;    // ops of the submitting client so far
    std::deque<PendingOp> waiting;  // submitted, until every local rank has submitted its op
    // The failures of its stream's next ops, whose places failed without them; none for a stream
    // whose client left, since the next client starts a stream of its own.
    std::deque<Status> owed;
    bool left = false;  // its submitting client left, and no other has come
  };

  bool every_stream_waits() const;
  bool some_stream_waits() const;
  // Runs every place that every local rank has reached.
  void run_complete_places();
  // Fails the place that some local ranks have reached and others have not (`why` says what the
  // others did), on every rank; the others' ops at that place fail when they come.
  void fail_incomplete(ErrorCode code, const std::string& why);
  void fail(PendingOp op, Status why);

  std::vector<LocalStream> streams_;  // by local rank
  int first_rank_;
  int host_;
  std::uint64_t places_ = 0;  // places of the streams run or failed, in all generations
  // The wait of the place some local ranks have reached: from which value of places_, until
  // when, and the op's timeout it counts.
  std::uint64_t waiting_since_place_ = ~std::uint64_t{0};
  std::optional<TimePoint> deadline_;
  std::uint32_t wait_ms_ = 0;
  std::vector<PairingAction> actions_;
};

}  // namespace gradsync::daemon
