// The gradsync client library: a training process hands tensors to its local worker daemon and
// gets the reduced tensors back. Tensor bytes move through shared memory; the daemon's unix socket
// carries only small control messages.
//
// Every client belongs to a training job and submits one op stream of it (docs/clients.md, "Jobs"):
// ops pair across ranks by (job, stream, place in the stream), so every rank must submit the same
// sequence on each stream. An op that another rank submits differently (count, dtype, op,
// collective) fails on every rank with an error naming both sides; an op of another job never
// pairs with it.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "collective/status.h"
#include "collective/types.h"
#include "config/knobs.h"

namespace gradsync {

struct GroupPlan;  // the whole plan, collective/group_plan.h: for the gradsync command
                   // (full_plan.h)

// How long Client::group() waits for the next generation unless told otherwise.
inline constexpr std::chrono::seconds kDefaultGroupTimeout{60};

// The group's plan in brief, the same on every rank: how the network was measured and what auto
// runs for each collective and size.
struct PlanView {
  // From `min_bytes` of data per rank on, until the next choice of the same collective.
  struct Choice {
    Collective collective;
    std::uint64_t min_bytes;
    Algorithm algorithm;
  };

  std::uint64_t generation = 0;
  int hosts = 0;
  bool measured = false;  // false: the coordinator was given the network model
  std::uint64_t table_version = 0;
  std::vector<Choice> table;
  std::string description;  // the network and the table, one line each, for people
};

// One daemon's view of itself and its group (Client::status, `gradsync status`).
struct DaemonStatus {
  int rank = 0;
  int world_size = 0;
  std::uint64_t generation = 0;
  std::vector<std::string> data_addresses;  // by rank
  int clients = 0;                          // connections open now, the asking one included
  std::string job;                          // the job the daemon serves; empty: none
  int submitter_pid = 0;                    // that job's first client there; 0: none
  std::uint64_t ops_served = 0;             // failed ones included
  std::uint64_t ops_failed = 0;
  double heartbeat_age_ms = 0;  // since the coordinator's socket last took a heartbeat
  Status coordinator;           // OK while the coordinator is there; otherwise why not
  double uptime_s = 0;          // since the daemon started serving clients
};

struct OpOptions {
  ReduceOp op = ReduceOp::sum;
  std::optional<Algorithm> algorithm;  // empty: the group's algorithm table chooses
  std::chrono::milliseconds timeout{knobs::kOpTimeoutMs.default_value};
  std::string name;  // shows in the daemon's log lines
  int root = 0;      // broadcast, reduce, gather and scatter
  // bf16 or f16: an f32 or f64 sum or avg (all-reduce, reduce-scatter; all-gather too) sends its
  // values rounded to 16 bits and adds them in the data type (docs/clients.md, "Semantics": the
  // error bound).
  std::optional<DataType> wire;
};

class ClientError : public std::runtime_error {
 public:
  explicit ClientError(Status status)
      : std::runtime_error(status.to_string()), status_(std::move(status)) {}
  ErrorCode code() const { return status_.code(); }
  const Status& status() const { return status_; }

 private:
  Status status_;
};

struct OpState;          // internal
struct PooledRegion;     // internal
class ClientConnection;  // internal

// Memory the daemon shares with this process. An in-place op (allreduce, broadcast) on a
// SharedTensor's data() moves no bytes between the client and the daemon: no copy in, no copy
// out. Other pointers work too, at the price of those two copies. A SharedTensor must not outlive
// its Client, and only one op may use it at a time.
class SharedTensor {
 public:
  SharedTensor() = default;
  SharedTensor(SharedTensor&& other) noexcept;
  SharedTensor& operator=(SharedTensor&& other) noexcept;
  ~SharedTensor();

  std::byte* data() const;
  std::size_t size() const;
  template <typename T>
  T* as() const {
    return reinterpret_cast<T*>(data());
  }

 private:
  friend class Client;
  SharedTensor(ClientConnection* connection, PooledRegion* region)
      : connection_(connection), region_(region) {}
  ClientConnection* connection_ = nullptr;
  PooledRegion* region_ = nullptr;
};

// An op in flight. wait() blocks until it is done (never past the op's timeout plus a grace
// period), copies the result into the caller's buffer and throws ClientError if the op failed.
class Handle {
 public:
  Handle() = default;
  void wait();
  // The algorithm the daemon ran; valid after wait().
  Algorithm algorithm() const;
  double elapsed_us() const;

 private:
  friend class Client;
  explicit Handle(std::shared_ptr<OpState> state) : state_(std::move(state)) {}
  std::shared_ptr<OpState> state_;
};

struct ConnectOptions {
  // How long to wait for the daemon: for its socket to appear (a training process may start
  // beside its daemon), and for it to answer (a daemon that took the connection gets 5 s at
  // least).
  std::chrono::milliseconds timeout = std::chrono::seconds(30);
  // Which of the daemon's local ranks the client is; empty: LOCAL_RANK (as torchrun sets it),
  // else 0. A daemon started with --local-ranks L serves local ranks 0 to L - 1.
  std::optional<int> local_rank;
  // The training job; empty: GRADSYNC_JOB, else what torchrun or Slurm says, else a job of this
  // process alone (until all its clients are closed). Every process of a job must name the same
  // one, and each run its own.
  std::string job;
  // The op stream within the job; empty: "0" for the process's first client of the job on this
  // daemon and local rank, "1" for its second, and so on.
  std::string stream;
  // A subgroup the stream's ops run over (docs/clients.md, "Subgroups"): global ranks, in the order
  // that makes them its ranks 0, 1, …; every member's client of the stream names the same list,
  // and the ranks outside it are not involved. Empty: every rank of the group. A host's members
  // must be adjacent in the list (any ascending list is fine).
  std::vector<int> members;
};

class Client {
 public:
  // Connects to the daemon listening on `socket_path`; throws ClientError.
  static Client connect(const std::string& socket_path, const ConnectOptions& options);
  static Client connect(const std::string& socket_path,
                        std::chrono::milliseconds timeout = std::chrono::seconds(30),
                        std::optional<int> local_rank = std::nullopt);
  Client(Client&&) noexcept;
  Client& operator=(Client&&) noexcept;
  // Closes the connection, as close() does.
  ~Client();

  // Ends the connection: its stream ends on every rank (an op of it that another rank runs and
  // that waits for this one fails there at once), and every later call throws ClientError. Its
  // ops in flight must have been waited for, and its SharedTensors be gone.
  void close();

  // This rank and the group's size, as of the generation the client last took note of. Ranks are
  // global and host-major: a host's first rank is the number of ranks of the hosts before it. A
  // subgroup's client says its rank in the subgroup and the subgroup's size: ops' roots and chunks
  // are by those.
  int rank() const;
  int world_size() const;
  // The subgroup's members (ConnectOptions::members); empty: every rank.
  const std::vector<int>& members() const;
  // Which of its daemon's ranks this client is, and how many the daemon serves.
  int local_rank() const;
  int local_world_size() const;
  std::uint64_t generation() const;
  // The job and the stream its ops belong to.
  const std::string& job() const;
  const std::string& stream() const;
  // Takes note of the group as it is now, waiting while a new generation forms: after an op
  // failed because a member was lost (PEER_LOST, ABORTED) the group re-forms, and later ops fail
  // with GROUP_CHANGED until this is called. rank() and world_size() then say the new ones.
  void group(std::chrono::milliseconds timeout = kDefaultGroupTimeout);
  // The CPUs the daemon runs on: all the machine's, unless it was started with --cpus.
  const std::vector<int>& daemon_cpus() const;
  // Binds the calling thread to the daemon's CPUs where that narrows where it may run, so that
  // the thread that submits and waits shares the daemon's caches and wakes where it sleeps. A
  // daemon that spins between ops (--spin-us) sleeps on no CPU: the thread then goes to the CPUs
  // the daemon does not run on, if it may use some, so that the two spin side by side instead of
  // taking turns. Returns false, changing nothing, where it would not narrow (the daemon is not
  // bound) or where this thread may not use those CPUs.
  bool bind_thread_beside_daemon();
  // The group's plan, the same on every rank: the network as the workers measured it and the
  // algorithm table built from it (what auto picks for each collective and size).
  PlanView plan(std::chrono::milliseconds timeout = std::chrono::seconds(10));
  DaemonStatus status(std::chrono::milliseconds timeout = std::chrono::seconds(10));

  // Bytes copied so far between callers' memory and the shared regions (in and out); ops in place
  // on a SharedTensor add nothing.
  std::uint64_t bytes_copied() const;

  // At least `bytes` bytes of shared memory, for ops that copy nothing (see SharedTensor).
  SharedTensor allocate(std::size_t bytes);

  // In place: `data` holds `count` elements on entry and their reduction on return.
  void allreduce(void* data, std::size_t count, DataType type, const OpOptions& options = {});
  Handle allreduce_async(void* data, std::size_t count, DataType type,
                         const OpOptions& options = {});
  // `input` holds `count` elements; `output` receives this rank's chunk of the balanced partition
  // (count / p elements, the first count % p ranks one more).
  void reduce_scatter(const void* input, std::size_t count, void* output, DataType type,
                      const OpOptions& options = {});
  Handle reduce_scatter_async(const void* input, std::size_t count, void* output, DataType type,
                              const OpOptions& options = {});
  // `input` holds this rank's chunk of the balanced partition of `count`; `output` receives all
  // `count` elements.
  void allgather(const void* input, void* output, std::size_t count, DataType type,
                 const OpOptions& options = {});
  Handle allgather_async(const void* input, void* output, std::size_t count, DataType type,
                         const OpOptions& options = {});
  // `data` holds `count` elements on options.root; every rank has them on return.
  void broadcast(void* data, std::size_t count, DataType type, const OpOptions& options = {});
  Handle broadcast_async(void* data, std::size_t count, DataType type,
                         const OpOptions& options = {});
  // `input` is p blocks of `block_count` elements, block j for rank j; `output` receives p blocks,
  // block i from rank i.
  void alltoall(const void* input, void* output, std::size_t block_count, DataType type,
                const OpOptions& options = {});
  Handle alltoall_async(const void* input, void* output, std::size_t block_count, DataType type,
                        const OpOptions& options = {});
  // `input` holds send_counts[j] elements for each rank j, back to back in rank order; `output`
  // receives recv_counts[i] elements from each rank i, the same way. Rank i's send_counts[j] must
  // equal rank j's recv_counts[i]: the call first all-gathers every rank's counts (so the async
  // form waits for that), and counts that disagree fail on every rank, naming the pairs.
  void alltoallv(const void* input, std::span<const std::uint64_t> send_counts, void* output,
                 std::span<const std::uint64_t> recv_counts, DataType type,
                 const OpOptions& options = {});
  Handle alltoallv_async(const void* input, std::span<const std::uint64_t> send_counts,
                         void* output, std::span<const std::uint64_t> recv_counts, DataType type,
                         const OpOptions& options = {});
  // In place on options.root: `data` holds `count` elements on entry, and on the root their
  // reduction on return; the other ranks' `data` is left as it was.
  void reduce(void* data, std::size_t count, DataType type, const OpOptions& options = {});
  Handle reduce_async(void* data, std::size_t count, DataType type, const OpOptions& options = {});
  // `input` holds this rank's chunk of the balanced partition of `count`; on options.root,
  // `output` receives all `count` elements (elsewhere it is not touched and may be null).
  void gather(const void* input, void* output, std::size_t count, DataType type,
              const OpOptions& options = {});
  Handle gather_async(const void* input, void* output, std::size_t count, DataType type,
                      const OpOptions& options = {});
  // On options.root, `input` holds `count` elements (elsewhere it is not read and may be null);
  // `output` receives this rank's chunk of their balanced partition.
  void scatter(const void* input, void* output, std::size_t count, DataType type,
               const OpOptions& options = {});
  Handle scatter_async(const void* input, void* output, std::size_t count, DataType type,
                       const OpOptions& options = {});
  void barrier(const OpOptions& options = {});

  // Point to point (docs/clients.md, "Point to point"): `count` elements of `data` to rank `peer`
  // of this client's stream (a subgroup's client: a subgroup rank), matched in order with that
  // rank's receive from this one of the same tag (0 to 2^31 - 1), whose count and type must be
  // the same. Returns once the bytes are out. Every send and receive in flight moves at once,
  // whatever order they were posted in: a ring of async ones cannot deadlock.
  void send(const void* data, std::size_t count, DataType type, int peer, std::int64_t tag = 0,
            const OpOptions& options = {});
  Handle send_async(const void* data, std::size_t count, DataType type, int peer,
                    std::int64_t tag = 0, const OpOptions& options = {});
  // `data` receives `count` elements from rank `peer`: its send to this rank of the same tag.
  void receive(void* data, std::size_t count, DataType type, int peer, std::int64_t tag = 0,
               const OpOptions& options = {});
  Handle receive_async(void* data, std::size_t count, DataType type, int peer, std::int64_t tag = 0,
                       const OpOptions& options = {});

 private:
  friend GroupPlan full_plan(Client& client, std::chrono::milliseconds timeout);
  explicit Client(std::unique_ptr<ClientConnection> connection);
  // The connection; throws once closed.
  ClientConnection* open() const;
  std::unique_ptr<ClientConnection> connection_;
};

}  // namespace gradsync
