#include <algorithm>
#include <atomic>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iterator>
#include <map>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "client/gradsync_client.h"
#include "collective/partition.h"
#include "collective/schedule.h"
#include "net/cpu_affinity.h"
#include "net/message_stream.h"
#include "net/op_queue.h"
#include "net/shared_memory.h"
#include "net/socket.h"
#include "proto/convert.h"

namespace gradsync {

namespace {

// A daemon gives up on an op at its timeout; the client waits this much longer for the verdict.
constexpr auto kResultGrace = std::chrono::seconds(10);
constexpr std::uint64_t kMinRegionBytes = 64 << 10;

void throw_if_failed(const Status& status) {
  if (!status.ok()) throw ClientError(status);
}

std::uint64_t rounded_region_size(std::uint64_t bytes) {
  std::uint64_t size = kMinRegionBytes;
  while (size < bytes) size *= 2;
  return size;
}

}  // namespace

struct PooledRegion {
  std::uint64_t id = 0;
  net::SharedRegion memory;
  bool busy = false;
  bool lent = false;  // to the caller as a SharedTensor: out of the pool until given back
};

struct OpState {
  std::uint64_t request_id = 0;
  PooledRegion* region = nullptr;  // null for ops without bytes
  void* output = nullptr;
  std::uint64_t output_offset = 0;
  std::uint64_t output_bytes = 0;
  net::Deadline deadline = net::Deadline::after(std::chrono::seconds(0));
  ClientConnection* connection = nullptr;
  bool done = false;
  bool reason_on_socket = false;  // failed: its result, with the reason, is to be read
  Status status;
  Algorithm algorithm = Algorithm::ring;
  double elapsed_us = 0;
};

// What one submission moves: the op's shape, and where the caller's bytes go in and come out.
struct Submission {
  OpShape shape;
  DataType type = DataType::f32;
  const void* input = nullptr;
  std::uint64_t input_offset = 0;  // in the region
  std::uint64_t input_bytes = 0;
  void* output = nullptr;
  std::uint64_t output_offset = 0;
  std::uint64_t output_bytes = 0;
};

class ClientConnection {
 public:
  ClientConnection(net::UniqueFd socket, int local_rank)
      : socket_(std::move(socket)), reader_(socket_.get()), local_rank_(local_rank) {}

  proto::ClientToDaemon hello_request() const {
    proto::ClientToDaemon request;
    request.mutable_hello()->set_local_rank(local_rank_);
    return request;
  }

  // Attaches the connection's op queue, then says hello.
  void hello(net::Deadline deadline) {
    throw_if_failed(net::SharedRegion::create(sizeof(net::OpQueueLayout), queue_region_));
    queue_ = net::OpQueueClientEnd(queue_region_.data());
    proto::ClientToDaemon attach;
    attach.mutable_attach()->set_op_queue(true);
    attach.mutable_attach()->set_bytes(queue_region_.size());
    Status sent = send(attach, deadline, queue_region_.fd());
    if (sent.ok()) sent = send(hello_request(), deadline);
    // A daemon that refuses a connection says why without reading the hello, and may have closed
    // it before the hello went: its reason is still there to read.
    proto::DaemonToClient reply;
    const Status received = reader_.receive(reply, deadline);
    if (received.ok() && reply.has_refused()) throw ClientError(from_proto(reply.refused()));
    throw_if_failed(sent);
    throw_if_failed(received);
    if (!reply.has_hello()) {
      throw ClientError(Status(ErrorCode::protocol_error, "the daemon did not answer the hello"));
    }
    take_hello(reply.hello());
  }

  void take_hello(const proto::DaemonHello& hello) {
    if (!hello.op_queue()) {
      throw ClientError(
          Status(ErrorCode::protocol_error,
                 "host " + std::to_string(hello.host()) +
                     "'s daemon did not take this client's op queue (its log says why)"));
    }
    spin_ = std::chrono::microseconds(std::max(hello.spin_us(), 0));
    rank_ = hello.rank();
    world_size_ = hello.world_size();
    generation_ = hello.generation();
    local_world_size_ = std::max(hello.local_ranks(), 1);
    daemon_cpus_.assign(hello.cpus().begin(), hello.cpus().end());
  }

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  int local_rank() const { return local_rank_; }
  int local_world_size() const { return local_world_size_; }
  std::uint64_t generation() const { return generation_; }
  const std::vector<int>& daemon_cpus() const { return daemon_cpus_; }
  bool daemon_spins() const { return spin_.count() > 0; }

  std::shared_ptr<OpState> submit(const Submission& submission, const OpOptions& options) {
    std::lock_guard lock(mutex_);
    if (queue_.full()) {
      await([this] { return !queue_.full(); },
            net::Deadline::after(options.timeout + kResultGrace));
      if (!lost_.ok()) throw ClientError(lost_);
      if (queue_.full()) {
        throw ClientError(
            Status(ErrorCode::deadline_exceeded, "the daemon answered none of the " +
                                                     std::to_string(net::kOpQueueSlots) +
                                                     " ops in flight within this op's timeout"));
      }
    }
    const std::uint64_t bytes = data_bytes(submission.shape) + output_bytes(submission.shape);
    auto state = std::make_shared<OpState>();
    state->request_id = next_request_id_++;
    state->connection = this;
    state->output = submission.output;
    state->output_offset = submission.output_offset;
    state->output_bytes = submission.output_bytes;
    state->deadline = net::Deadline::after(options.timeout + kResultGrace);
    PooledRegion* lent = lent_region_at(submission.input);
    const bool in_place = submission.input == submission.output && submission.input_offset == 0 &&
                          submission.output_offset == 0;
    if (bytes > 0 && lent != nullptr && in_place && lent->memory.size() >= bytes) {
      // The caller's tensor already lives in the daemon's view: nothing to copy either way.
      state->region = lent;
      state->output_bytes = 0;
    } else if (bytes > 0) {
      state->region = &acquire_region(bytes);
      if (submission.input_bytes > 0) {
        std::memcpy(state->region->memory.data() + submission.input_offset, submission.input,
                    submission.input_bytes);
        bytes_copied_ += submission.input_bytes;
      }
    }
    net::QueuedOp op{};
    op.request_id = state->request_id;
    op.region_id = state->region != nullptr ? state->region->id : 0;
    op.count = submission.shape.count;
    op.socket_messages_before = socket_messages_sent_;
    op.collective = to_proto(submission.shape.collective);
    op.dtype = to_proto(submission.type);
    op.op = to_proto(options.op);
    op.algorithm = options.algorithm ? to_proto(*options.algorithm) : proto::ALGORITHM_AUTO;
    op.root = submission.shape.root;
    op.wire = options.wire ? to_proto(*options.wire) : proto::DATA_TYPE_UNSPECIFIED;
    op.timeout_ms = static_cast<std::uint32_t>(options.timeout.count());
    options.name.copy(op.name, sizeof op.name - 1);
    in_flight_[state->request_id] = state;
    if (queue_.publish(op)) ring_doorbell(options.timeout);
    return state;
  }

  void wait(OpState& state) {
    std::lock_guard lock(mutex_);
    await([&state] { return state.done; }, state.deadline);
    throw_if_failed(state.status);
  }

  // Sends `request` and returns the daemon's answer, the first message that `is_answer` accepts;
  // results of ops in flight that arrive first are kept.
  proto::DaemonToClient ask(const proto::ClientToDaemon& request,
                            bool (proto::DaemonToClient::*is_answer)() const,
                            net::Deadline deadline) {
    std::lock_guard lock(mutex_);
    if (const Status sent = send(request, deadline); !sent.ok()) {
      throw ClientError(daemon_lost(sent));
    }
    while (true) {
      proto::DaemonToClient message;
      if (const Status status = reader_.receive(message, deadline); !status.ok()) {
        // The stream may stop mid-message: nothing more can be read from it.
        fail_everything(daemon_lost(status));
        throw ClientError(status.code() == ErrorCode::deadline_exceeded ? status
                                                                        : daemon_lost(status));
      }
      if (message.has_result()) deliver(message.result());
      if ((message.*is_answer)()) return message;
    }
  }

  std::uint64_t bytes_copied() const { return bytes_copied_; }

  PooledRegion* lend(std::uint64_t bytes) {
    std::lock_guard lock(mutex_);
    PooledRegion& region = acquire_region(bytes);
    region.lent = true;
    return &region;
  }

  void give_back(PooledRegion* region) {
    std::lock_guard lock(mutex_);
    region->lent = false;
    region->busy = false;
  }

 private:
  // What every call says once the connection to the daemon has failed.
  static Status daemon_lost(const Status& failed) {
    return Status(ErrorCode::peer_lost, "lost the daemon: " + failed.message());
  }

  PooledRegion* lent_region_at(const void* address) {
    for (auto& region : regions_) {
      if (region->lent && region->memory.data() == address) return region.get();
    }
    return nullptr;
  }

  PooledRegion& acquire_region(std::uint64_t bytes) {
    for (auto& region : regions_) {
      if (!region->busy && !region->lent && region->memory.size() >= bytes) {
        region->busy = true;
        return *region;
      }
    }
    auto region = std::make_unique<PooledRegion>();
    region->id = next_region_id_++;
    throw_if_failed(net::SharedRegion::create(rounded_region_size(bytes), region->memory));
    proto::ClientToDaemon attach;
    attach.mutable_attach()->set_region_id(region->id);
    attach.mutable_attach()->set_bytes(region->memory.size());
    if (const Status sent =
            send(attach, net::Deadline::after(std::chrono::seconds(10)), region->memory.fd());
        !sent.ok()) {
      throw ClientError(daemon_lost(sent));
    }
    region->busy = true;
    regions_.push_back(std::move(region));
    return *regions_.back();
  }

  void release(OpState& state) {
    if (state.region != nullptr && !state.region->lent) state.region->busy = false;
    state.region = nullptr;
  }

  // Every message on the socket counts: an op in the queue says how many came before it.
  Status send(const proto::ClientToDaemon& message, net::Deadline deadline, int attached_fd = -1) {
    Status sent = net::send_message(socket_.get(), message, deadline, attached_fd);
    if (sent.ok()) ++socket_messages_sent_;
    return sent;
  }

  void ring_doorbell(std::chrono::milliseconds timeout) {
    proto::ClientToDaemon doorbell;
    doorbell.mutable_doorbell();
    if (const Status sent = send(doorbell, net::Deadline::after(timeout)); !sent.ok()) {
      fail_everything(daemon_lost(sent));
    }
  }

  // Takes results until `done()`: from the queue while the daemon spins, and for as long; then
  // asleep on the socket, which brings a doorbell, a failed op's reason or the daemon's end.
  void await(const std::function<bool()>& done, net::Deadline deadline) {
    const auto spin_until = net::Clock::now() + spin_;
    while (true) {
      take_results();
      if (done()) return;
      if (reasons_to_read_ == 0 && net::Clock::now() < spin_until) {
        std::this_thread::yield();  // the daemon may share this CPU
        continue;
      }
      queue_.fall_asleep();
      take_results();  // one the daemon published before it could see the flag rings nothing
      bool rung = false;
      if (!done() && !read_socket(deadline, rung)) return;
      // A doorbell the daemon committed to when it took the flag down is read now, not left in
      // the socket for a later sleep to wake on.
      if (!queue_.wake()) {
        while (!rung) {
          if (!read_socket(deadline, rung)) return;
        }
      }
    }
  }

  // Reads one message: a doorbell (`rung`), or a failed op's result; false, with every op in
  // flight failed, if none came before `deadline`.
  bool read_socket(net::Deadline deadline, bool& rung) {
    proto::DaemonToClient message;
    if (const Status status = reader_.receive(message, deadline); !status.ok()) {
      fail_everything(status.code() == ErrorCode::deadline_exceeded
                          ? Status(ErrorCode::deadline_exceeded,
                                   "no result from the daemon before the op's timeout")
                          : daemon_lost(status));
      return false;
    }
    rung = rung || message.has_doorbell();
    if (message.has_result()) deliver(message.result());
    return true;
  }

  void take_results() {
    queue_.take_results([this](const net::QueuedResult& result) {
      const auto found = in_flight_.find(result.request_id);
      if (found == in_flight_.end()) return;  // failed already: its reason came first, or no daemon
      OpState& state = *found->second;
      if (result.failed != 0) {
        state.reason_on_socket = true;
        ++reasons_to_read_;
        return;
      }
      complete(state, Status(), from_proto(static_cast<proto::Algorithm>(result.algorithm)),
               result.elapsed_us);
      in_flight_.erase(found);
    });
  }

  void deliver(const proto::OpResult& result) {
    const auto found = in_flight_.find(result.request_id());
    if (found == in_flight_.end()) return;
    if (found->second->reason_on_socket) --reasons_to_read_;
    complete(*found->second, from_proto(result.status()), from_proto(result.algorithm()),
             result.elapsed_us());
    in_flight_.erase(found);
  }

  void complete(OpState& state, Status status, std::optional<Algorithm> algorithm,
                double elapsed_us) {
    state.status = std::move(status);
    state.algorithm = algorithm.value_or(Algorithm::ring);
    state.elapsed_us = elapsed_us;
    if (state.status.ok() && state.output_bytes > 0) {
      std::memcpy(state.output, state.region->memory.data() + state.output_offset,
                  state.output_bytes);
      bytes_copied_ += state.output_bytes;
    }
    state.done = true;
    release(state);
  }

  void fail_everything(const Status& reason) {
    if (reason.code() == ErrorCode::peer_lost) lost_ = reason;
    for (auto& [id, pending] : in_flight_) {
      pending->status = reason;
      pending->done = true;
      release(*pending);
    }
    in_flight_.clear();
    reasons_to_read_ = 0;
  }

  net::UniqueFd socket_;
  net::MessageReader reader_;
  int rank_ = 0;
  int world_size_ = 1;
  const int local_rank_;
  int local_world_size_ = 1;
  std::uint64_t generation_ = 0;
  std::vector<int> daemon_cpus_;
  std::mutex mutex_;
  std::uint64_t next_request_id_ = 1;
  std::atomic<std::uint64_t> bytes_copied_{0};
  std::uint64_t next_region_id_ = 1;
  std::vector<std::unique_ptr<PooledRegion>> regions_;
  std::map<std::uint64_t, std::shared_ptr<OpState>> in_flight_;
  net::SharedRegion queue_region_;
  net::OpQueueClientEnd queue_;
  std::chrono::microseconds spin_{0};  // the daemon's
  std::uint64_t socket_messages_sent_ = 0;
  int reasons_to_read_ = 0;  // failed ops in flight whose reason is on the socket, unread
  Status lost_;              // why the daemon is gone, once it is
};

SharedTensor::SharedTensor(SharedTensor&& other) noexcept
    : connection_(std::exchange(other.connection_, nullptr)),
      region_(std::exchange(other.region_, nullptr)) {}

SharedTensor& SharedTensor::operator=(SharedTensor&& other) noexcept {
  if (this != &other) {
    if (region_ != nullptr) connection_->give_back(region_);
    connection_ = std::exchange(other.connection_, nullptr);
    region_ = std::exchange(other.region_, nullptr);
  }
  return *this;
}

SharedTensor::~SharedTensor() {
  if (region_ != nullptr) connection_->give_back(region_);
}

std::byte* SharedTensor::data() const {
  return region_ != nullptr ? region_->memory.data() : nullptr;
}
std::size_t SharedTensor::size() const { return region_ != nullptr ? region_->memory.size() : 0; }

std::uint64_t Client::bytes_copied() const { return connection_->bytes_copied(); }

SharedTensor Client::allocate(std::size_t bytes) {
  return SharedTensor(connection_.get(), connection_->lend(std::max<std::size_t>(bytes, 1)));
}

void Handle::wait() {
  if (!state_) throw ClientError(Status(ErrorCode::invalid_argument, "wait() on an empty handle"));
  state_->connection->wait(*state_);
}

Algorithm Handle::algorithm() const { return state_->algorithm; }
double Handle::elapsed_us() const { return state_->elapsed_us; }

static int local_rank_from_environment() {
  const char* text = std::getenv("LOCAL_RANK");
  if (text == nullptr || *text == '\0') return 0;
  int value = 0;
  const char* end = text + std::strlen(text);
  const auto [stop, error] = std::from_chars(text, end, value);
  if (error != std::errc() || stop != end || value < 0) {
    throw ClientError(Status(ErrorCode::invalid_argument, "LOCAL_RANK is '" + std::string(text) +
                                                              "', not a local rank (0, 1, ...)"));
  }
  return value;
}

Client Client::connect(const std::string& socket_path, std::chrono::milliseconds timeout,
                       std::optional<int> local_rank) {
  const auto deadline = net::Deadline::after(timeout);
  net::UniqueFd socket;
  throw_if_failed(net::connect_unix(socket_path, deadline, socket));
  auto connection = std::make_unique<ClientConnection>(
      std::move(socket), local_rank ? *local_rank : local_rank_from_environment());
  connection->hello(deadline);
  return Client(std::move(connection));
}

Client::Client(std::unique_ptr<ClientConnection> connection) : connection_(std::move(connection)) {}
Client::Client(Client&&) noexcept = default;
Client& Client::operator=(Client&&) noexcept = default;
Client::~Client() = default;

int Client::rank() const { return connection_->rank(); }
int Client::world_size() const { return connection_->world_size(); }
int Client::local_rank() const { return connection_->local_rank(); }
int Client::local_world_size() const { return connection_->local_world_size(); }
std::uint64_t Client::generation() const { return connection_->generation(); }

void Client::group(std::chrono::milliseconds timeout) {
  const proto::DaemonToClient answer =
      connection_->ask(connection_->hello_request(), &proto::DaemonToClient::has_hello,
                       net::Deadline::after(timeout));
  connection_->take_hello(answer.hello());
}
const std::vector<int>& Client::daemon_cpus() const { return connection_->daemon_cpus(); }

bool Client::bind_thread_beside_daemon() {
  const std::vector<int> allowed = net::allowed_cpus();
  const std::vector<int>& daemon = daemon_cpus();
  std::vector<int> chosen;
  // A daemon that spins between ops does not sleep and wake: this thread, spinning on its results
  // on the same CPU, would take turns with it, a context switch each way.
  if (connection_->daemon_spins()) {
    std::set_difference(allowed.begin(), allowed.end(), daemon.begin(), daemon.end(),
                        std::back_inserter(chosen));
  }
  if (chosen.empty()) {
    std::set_intersection(allowed.begin(), allowed.end(), daemon.begin(), daemon.end(),
                          std::back_inserter(chosen));
  }
  if (chosen.empty() || chosen == allowed) return false;
  return net::bind_thread_to_cpus(chosen).ok();
}
GroupPlan Client::plan(std::chrono::milliseconds timeout) {
  proto::ClientToDaemon request;
  request.mutable_plan_request();
  const proto::DaemonToClient answer =
      connection_->ask(request, &proto::DaemonToClient::has_plan, net::Deadline::after(timeout));
  GroupPlan plan;
  throw_if_failed(from_proto(answer.plan(), plan));
  return plan;
}

DaemonStatus Client::status(std::chrono::milliseconds timeout) {
  proto::ClientToDaemon request;
  request.mutable_status_request();
  const proto::DaemonToClient reply =
      connection_->ask(request, &proto::DaemonToClient::has_status, net::Deadline::after(timeout));
  const proto::DaemonStatus& answer = reply.status();
  DaemonStatus status{answer.rank(),
                      answer.world_size(),
                      answer.generation(),
                      {},
                      answer.clients(),
                      answer.submitter_pid(),
                      answer.ops_served(),
                      answer.ops_failed(),
                      answer.heartbeat_age_ms(),
                      from_proto(answer.coordinator()),
                      answer.uptime_s()};
  status.data_addresses.resize(std::max(answer.world_size(), 0));
  for (const proto::Peer& peer : answer.peers()) {
    if (peer.rank() >= 0 && peer.rank() < answer.world_size()) {
      status.data_addresses[peer.rank()] = peer.data_address();
    }
  }
  return status;
}

Handle Client::allreduce_async(void* data, std::size_t count, DataType type,
                               const OpOptions& options) {
  const std::uint64_t bytes = count * element_size(type);
  Submission submission{{Collective::allreduce, world_size(), count, element_size(type)},
                        type,
                        data,
                        0,
                        bytes,
                        data,
                        0,
                        bytes};
  return Handle(connection_->submit(submission, options));
}

Handle Client::reduce_scatter_async(const void* input, std::size_t count, void* output,
                                    DataType type, const OpOptions& options) {
  const std::size_t size = element_size(type);
  const Chunk mine = balanced_chunk(count, world_size(), rank());
  Submission submission{{Collective::reduce_scatter, world_size(), count, size},
                        type,
                        input,
                        0,
                        count * size,
                        output,
                        mine.offset * size,
                        mine.count * size};
  return Handle(connection_->submit(submission, options));
}

Handle Client::allgather_async(const void* input, void* output, std::size_t count, DataType type,
                               const OpOptions& options) {
  const std::size_t size = element_size(type);
  const Chunk mine = balanced_chunk(count, world_size(), rank());
  Submission submission{{Collective::allgather, world_size(), count, size},
                        type,
                        input,
                        mine.offset * size,
                        mine.count * size,
                        output,
                        0,
                        count * size};
  return Handle(connection_->submit(submission, options));
}

Handle Client::broadcast_async(void* data, std::size_t count, DataType type,
                               const OpOptions& options) {
  const std::uint64_t bytes = count * element_size(type);
  OpShape shape{Collective::broadcast, world_size(), count, element_size(type), options.root};
  // Only the root's bytes matter; the others' are overwritten.
  const std::uint64_t input_bytes = rank() == options.root ? bytes : 0;
  Submission submission{shape, type, data, 0, input_bytes, data, 0, bytes};
  return Handle(connection_->submit(submission, options));
}

Handle Client::alltoall_async(const void* input, void* output, std::size_t block_count,
                              DataType type, const OpOptions& options) {
  const OpShape shape{Collective::alltoall, world_size(), block_count, element_size(type)};
  const std::uint64_t bytes = data_bytes(shape);
  Submission submission{shape, type, input, 0, bytes, output, bytes, bytes};
  return Handle(connection_->submit(submission, options));
}

void Client::allreduce(void* data, std::size_t count, DataType type, const OpOptions& options) {
  allreduce_async(data, count, type, options).wait();
}
void Client::reduce_scatter(const void* input, std::size_t count, void* output, DataType type,
                            const OpOptions& options) {
  reduce_scatter_async(input, count, output, type, options).wait();
}
void Client::allgather(const void* input, void* output, std::size_t count, DataType type,
                       const OpOptions& options) {
  allgather_async(input, output, count, type, options).wait();
}
void Client::broadcast(void* data, std::size_t count, DataType type, const OpOptions& options) {
  broadcast_async(data, count, type, options).wait();
}
void Client::alltoall(const void* input, void* output, std::size_t block_count, DataType type,
                      const OpOptions& options) {
  alltoall_async(input, output, block_count, type, options).wait();
}
void Client::barrier(const OpOptions& options) {
  Submission submission{{Collective::barrier, world_size(), 0, 1}, DataType::u8};
  Handle(connection_->submit(submission, options)).wait();
}

}  // namespace gradsync
