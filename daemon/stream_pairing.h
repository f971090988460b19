// Which ops of a daemon's local ranks run together, as a pure state machine (docs/architecture.md
// §6.2). A training job's clients carry its name, and each client submits one op stream of the job
// (its name too): ops pair by (job, stream, place), within a daemon across its local ranks as
// between daemons. Events in (a client claims a local rank of a stream, submits its next op,
// leaves; the group moves to a new generation; the clock), actions out (run the ops at one place;
// answer one op with a failure; a stream's client has left). A place that some local
// ranks have reached and another has not fails on every rank once the op's timeout has passed, or
// at once when the missing rank's client leaves; the late rank's own op at that place then fails
// when it comes. No sockets, no threads, no clock of its own: the caller passes the time, so tests
// drive it with a fake one.
//
// A daemon serves one job at a time: from its first client's claim until its last client has
// left. A client of another job is refused, naming the job that holds the daemon and since when;
// nothing of a job that has left (its streams, places, waiting ops) stays.
#pragma once

#include <chrono>
#include <compare>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "collective/status.h"
#include "engine/frame.h"
#include "gradsync.pb.h"
#include "net/shared_memory.h"

namespace gradsync::daemon {

class ClientSession;

// The longest job or stream name a hello may give.
inline constexpr std::size_t kMaxNameBytes = 256;

// A client of the daemon, as the server numbers them.
using ClientId = std::uint64_t;

// An op stream as a client's hello names it: its job, and the stream within the job.
struct StreamName {
  std::string job;
  std::string stream;

  friend auto operator<=>(const StreamName&, const StreamName&) = default;
  // The job's and the stream's tags, which frames carry (engine/frame.h), at `place` of the
  // stream's `client`-th submitting client on its local rank (StreamPairing::key_of).
  engine::OpKey key(std::uint64_t place, std::uint64_t client = 0) const;
};

// A tag of a name, the same on every host and never 0 (the daemon's own ops' job).
std::uint64_t name_tag(std::string_view name);

struct PendingOp {
  std::shared_ptr<ClientSession> session;  // to answer it; the pairing never looks at it
  ClientId client = 0;
  proto::SubmitOp op;
  std::shared_ptr<net::SharedRegion> region;  // null for ops without bytes or an unknown region
  engine::OpKey key;  // its job, stream and place: 1 for the client's first op of the generation
  int local_rank = 0;
  bool queued = false;  // it came through the client's op queue: answered there (and a failure's
                        // reason on the socket)
};

// The ops at one place of a stream of every local rank, which the worker runs as one op.
struct LocalOps {
  std::vector<PendingOp>
      ops;                   // by local rank (a subgroup's: its order); those of `missing` left out
  Status missing;            // why some local rank's op will not come; the op then fails
  std::vector<int> members;  // a subgroup's stream: its members (collective/subgroup.h)
};

struct PairingAction {
  enum class Kind {
    run,           // the ops at one place of a stream (`place`)
    fail,          // one op (`op`), answered with `why`
    stream_ended,  // a client of stream `stream` has left (`why`) after submitting the op at
                   // stream.place: the other hosts are told
  };
  Kind kind = Kind::run;
  LocalOps place;
  PendingOp op;
  Status why;
  engine::OpKey stream;
};

// A local rank's client that left while the others waited for its op (StreamPairing::left).
struct Leaver {
  StreamName stream;
  int local_rank = 0;
  int pid = 0;
};

class StreamPairing {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  // `local_ranks` local ranks, of the ranks from `first_rank` on, on host `host`.
  StreamPairing(int local_ranks, int first_rank, int host);

  int local_ranks() const { return local_ranks_; }
  // "local rank 1 (rank 5)"
  std::string name_of(int local_rank) const;

  // Makes `client` (process `pid`) the submitting client of `local_rank` in stream `stream`,
  // unless another one is, or the daemon serves another job (mismatch, naming it and since when).
  // `members`: the subgroup the stream's ops run over, as its hello names it (empty: every rank);
  // every client of the stream names the same, and the local rank is one of them.
  Status claim(int local_rank, ClientId client, int pid, const StreamName& stream,
               const std::vector<int>& members = {});
  // Whether `client` is a submitting client.
  bool submits(ClientId client) const { return claims_.contains(client); }
  // The key of submitting client `client`'s op at `place`. A stream's consecutive clients on a
  // local rank are numbered, in its job and generation, and their ops keyed apart: the places of
  // each start at 1, and a rank whose part of an op ends early (one that only sends) can start
  // its next client's op while a peer still reads the last one's frames.
  engine::OpKey key_of(ClientId client, std::uint64_t place) const;
  // The job the daemon serves, and the pid of its first client; empty and 0 while none.
  std::string job() const { return holder_ ? holder_->job : std::string(); }
  int job_pid() const { return holder_ ? holder_->pid : 0; }

  // The next op of its client's stream (`op.client` has claimed it): it waits until every local
  // rank has reached its place (or fails, if that place has failed already).
  void submit(PendingOp op);
  // `client` has gone: its stream of its local rank has no client until one claims it, and the
  // other hosts are to be told (an action). Returns the places the others wait at for it: call
  // fail_place_left(), from the event loop's next turn, to fail each unless another client has
  // claimed the rank by then.
  std::vector<Leaver> left(ClientId client);
  void fail_place_left(const Leaver& leaver);

  // The group moved to `generation`, whose ranks are named from `first_rank` on host `host`: an op
  // that waited fails (its place was of the generation before).
  void new_generation(int first_rank, int host, std::uint64_t generation);

  // Once the actions are done: a place that some local ranks have reached waits from `now` on, as
  // long as its op's timeout.
  void start_waiting(TimePoint now);
  // When tick() fails a place; nullopt while none waits.
  std::optional<TimePoint> deadline() const;
  void tick(TimePoint now);

  // The actions since the last call, in order, except that the places to run are in the order
  // their processes submitted them (SubmitOp::process_order): a caller that has submitted every op
  // its clients had published before taking them runs one program's ops of several streams in the
  // same order on every daemon.
  std::vector<PairingAction> take_actions();

 private:
  // One local rank's op stream.
  struct LocalStream {
    std::optional<ClientId> submitter;
    int submitter_pid = 0;
    std::chrono::system_clock::time_point submitter_since;
    std::deque<PendingOp> waiting;  // submitted, until every local rank has submitted its op
    std::uint64_t last_place = 0;   // of the last op submitted
    // The failures of its stream's next ops, whose places failed without them; none for a stream
    // whose client left, since the next client starts a stream of its own.
    std::deque<Status> owed;
    bool left = false;  // its submitting client left, and no other has come
  };

  // One stream of every local rank (of a subgroup's stream, every member's).
  struct Stream {
    std::vector<LocalStream> locals;  // by local rank
    std::vector<int> members;         // of a subgroup; empty: every rank
    std::vector<int> order;           // the local ranks whose ops run together, in their order
    // The wait of the place some local ranks have reached: from which value of places, until
    // when, and the op's timeout it counts.
    std::uint64_t places = 0;  // places run or failed, in all generations
    std::uint64_t waiting_since_place = ~std::uint64_t{0};
    std::optional<TimePoint> deadline;
    std::uint32_t wait_ms = 0;

    bool every_local_waits() const;
    bool some_local_waits() const;
  };

  // The job the daemon serves.
  struct Holder {
    std::string job;
    int pid = 0;
    std::chrono::system_clock::time_point since;
  };

  struct Claim {
    StreamName stream;
    int local_rank = 0;
    std::uint64_t number = 1;  // among the stream's clients on the local rank
  };

  // A stream of one local rank, whose clients are numbered.
  using NumberedStream = std::pair<StreamName, int>;

  // The local ranks of `stream` on this host, in its order.
  std::vector<int> locals_of(const Stream& stream) const;
  // Runs every place of `stream` that every local rank has reached.
  void run_complete_places(Stream& stream);
  // Fails the place of `stream` that some local ranks have reached and others have not (`why`
  // says what the others did), on every rank; the others' ops at that place fail when they come.
  void fail_incomplete(Stream& stream, ErrorCode code, const std::string& why);
  void fail(PendingOp op, Status why);
  // The job has no client left here: nothing of it stays.
  void end_job();

  int local_ranks_;
  int first_rank_;
  int host_;
  std::map<StreamName, Stream> streams_;
  std::map<ClientId, Claim> claims_;
  // The last client number of each stream of a local rank: kept past the end of its job (a job
  // whose processes each open one client per op has no client between them), for the
  // engine::kMaxStreamsKept streams claimed last, and started again in a new generation.
  std::map<NumberedStream, std::uint64_t> client_numbers_;
  std::deque<NumberedStream> numbered_by_age_;
  std::optional<Holder> holder_;
  std::vector<PairingAction> actions_;
};

}  // namespace gradsync::daemon
