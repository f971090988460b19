// The public client API (client/gradsync_client.h) over the connection to the daemon.
#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <iterator>
#include <thread>
#include <utility>
#include <vector>

#include "client/alltoallv_splits.h"
#include "client/client_connection.h"
#include "client/full_plan.h"
#include "collective/group_plan.h"
#include "collective/partition.h"
#include "net/cpu_affinity.h"

namespace gradsync {

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

std::uint64_t Client::bytes_copied() const { return open()->bytes_copied(); }

SharedTensor Client::allocate(std::size_t bytes) {
  return SharedTensor(connection_.get(), open()->lend(std::max<std::size_t>(bytes, 1)));
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

// Connects to the daemon's socket, waiting until `deadline` for it to appear and take connections:
// a daemon that is starting has none yet, or one that refuses.
static net::UniqueFd connect_waiting(const std::string& socket_path,
                                     std::chrono::milliseconds timeout, net::Deadline deadline) {
  while (true) {
    net::UniqueFd socket;
    const Status status = net::connect_unix(socket_path, deadline, socket);
    if (status.ok()) return socket;
    if (status.code() != ErrorCode::peer_lost) throw ClientError(status);
    if (deadline.expired()) {
      throw ClientError(Status(ErrorCode::deadline_exceeded,
                               "no gradsync daemon served " + socket_path + " within " +
                                   std::to_string(timeout.count()) + " ms of waiting for it (" +
                                   status.message() + ")"));
    }
    std::this_thread::sleep_for(std::min<net::Clock::duration>(
        std::chrono::milliseconds(50), deadline.when() - net::Clock::now()));
  }
}

Client Client::connect(const std::string& socket_path, const ConnectOptions& options) {
  const auto deadline = net::Deadline::after(options.timeout);
  const int local_rank = options.local_rank ? *options.local_rank : local_rank_from_environment();
  ClientNames names(options.job, options.stream, socket_path, local_rank);
  auto connection =
      std::make_unique<ClientConnection>(connect_waiting(socket_path, options.timeout, deadline),
                                         local_rank, std::move(names), options.members);
  connection->hello(net::Deadline(std::max(deadline.when(), net::Clock::now() + kHelloAtLeast)));
  connection->keep_names();
  return Client(std::move(connection));
}

Client Client::connect(const std::string& socket_path, std::chrono::milliseconds timeout,
                       std::optional<int> local_rank) {
  return connect(socket_path, ConnectOptions{timeout, local_rank, {}, {}, {}});
}

Client::Client(std::unique_ptr<ClientConnection> connection) : connection_(std::move(connection)) {}

ClientConnection* Client::open() const {
  if (connection_ == nullptr) {
    throw ClientError(Status(ErrorCode::invalid_argument, "the client is closed"));
  }
  return connection_.get();
}

void Client::close() { connection_.reset(); }
Client::Client(Client&&) noexcept = default;
Client& Client::operator=(Client&&) noexcept = default;
Client::~Client() = default;

int Client::rank() const { return open()->rank(); }
int Client::world_size() const { return open()->world_size(); }
const std::vector<int>& Client::members() const { return open()->members(); }
int Client::local_rank() const { return open()->local_rank(); }
int Client::local_world_size() const { return open()->local_world_size(); }
std::uint64_t Client::generation() const { return open()->generation(); }
const std::string& Client::job() const { return open()->job(); }
const std::string& Client::stream() const { return open()->stream(); }

void Client::group(std::chrono::milliseconds timeout) {
  const proto::DaemonToClient answer = open()->ask(
      open()->hello_request(), &proto::DaemonToClient::has_hello, net::Deadline::after(timeout));
  open()->take_hello(answer.hello());
}
const std::vector<int>& Client::daemon_cpus() const { return open()->daemon_cpus(); }

bool Client::bind_thread_beside_daemon() {
  const std::vector<int> allowed = net::allowed_cpus();
  const std::vector<int>& daemon = daemon_cpus();
  std::vector<int> chosen;
  // A daemon that spins between ops does not sleep and wake: this thread, spinning on its results
  // on the same CPU, would take turns with it, a context switch each way.
  if (open()->daemon_spins()) {
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
GroupPlan full_plan(Client& client, std::chrono::milliseconds timeout) {
  proto::ClientToDaemon request;
  request.mutable_plan_request();
  const proto::DaemonToClient answer =
      client.open()->ask(request, &proto::DaemonToClient::has_plan, net::Deadline::after(timeout));
  GroupPlan plan;
  throw_if_failed(from_proto(answer.plan(), plan));
  return plan;
}

PlanView Client::plan(std::chrono::milliseconds timeout) {
  const GroupPlan plan = full_plan(*this, timeout);
  PlanView view{plan.generation, plan.world_size, plan.measured, plan.table_version, {},
                describe(plan)};
  for (const Threshold& threshold : plan.table.thresholds()) {
    view.table.push_back({threshold.collective, threshold.min_bytes, threshold.algorithm});
  }
  return view;
}

DaemonStatus Client::status(std::chrono::milliseconds timeout) {
  proto::ClientToDaemon request;
  request.mutable_status_request();
  const proto::DaemonToClient reply =
      open()->ask(request, &proto::DaemonToClient::has_status, net::Deadline::after(timeout));
  const proto::DaemonStatus& answer = reply.status();
  DaemonStatus status{answer.rank(),
                      answer.world_size(),
                      answer.generation(),
                      {},
                      answer.clients(),
                      answer.job(),
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
  return Handle(open()->submit(submission, options));
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
  return Handle(open()->submit(submission, options));
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
  return Handle(open()->submit(submission, options));
}

Handle Client::broadcast_async(void* data, std::size_t count, DataType type,
                               const OpOptions& options) {
  const std::uint64_t bytes = count * element_size(type);
  OpShape shape{Collective::broadcast, world_size(), count, element_size(type), options.root};
  // Only the root's bytes matter; the others' are overwritten.
  const std::uint64_t input_bytes = rank() == options.root ? bytes : 0;
  Submission submission{shape, type, data, 0, input_bytes, data, 0, bytes};
  return Handle(open()->submit(submission, options));
}

Handle Client::alltoall_async(const void* input, void* output, std::size_t block_count,
                              DataType type, const OpOptions& options) {
  const OpShape shape{Collective::alltoall, world_size(), block_count, element_size(type)};
  const std::uint64_t bytes = data_bytes(shape);
  Submission submission{shape, type, input, 0, bytes, output, bytes, bytes};
  return Handle(open()->submit(submission, options));
}

Handle Client::alltoallv_async(const void* input, std::span<const std::uint64_t> send_counts,
                               void* output, std::span<const std::uint64_t> recv_counts,
                               DataType type, const OpOptions& options) {
  const int p = world_size();
  if (send_counts.size() != static_cast<std::size_t>(p) ||
      recv_counts.size() != static_cast<std::size_t>(p)) {
    throw ClientError(Status(ErrorCode::invalid_argument,
                             "alltoallv takes a send and a receive count for each of the " +
                                 std::to_string(p) + " ranks; got " +
                                 std::to_string(send_counts.size()) + " and " +
                                 std::to_string(recv_counts.size())));
  }
  // Every rank's counts, so that every rank has the whole matrix and checks it alike.
  const std::uint64_t row_length = splits_row_length(p);
  std::vector<std::uint64_t> rows(row_length * static_cast<std::uint64_t>(p));
  const std::vector<std::uint64_t> row = splits_row(send_counts, recv_counts);
  OpOptions counts_options;
  counts_options.timeout = options.timeout;
  counts_options.name = options.name;
  allgather(row.data(), rows.data(), rows.size(), DataType::i64, counts_options);
  std::vector<std::uint64_t> splits;
  if (Status agreed = splits_from_rows(rows, p, splits); !agreed.ok()) throw ClientError(agreed);
  const OpShape shape = alltoallv_shape(p, std::move(splits), element_size(type));
  const std::uint64_t sent = data_bytes(shape, rank());
  Submission submission{shape,
                        type,
                        input,
                        splits_bytes(shape),
                        sent,
                        output,
                        splits_bytes(shape) + sent,
                        output_bytes(shape, rank())};
  submission.splits = submission.shape.splits;
  return Handle(open()->submit(submission, options));
}

Handle Client::send_async(const void* data, std::size_t count, DataType type, int peer,
                          std::int64_t tag, const OpOptions& options) {
  const std::uint64_t bytes = count * element_size(type);
  Submission submission{
      {Collective::broadcast, world_size(), count, element_size(type)}, type, data, 0, bytes};
  submission.transfer = {proto::TRANSFER_SEND, peer, tag};
  return Handle(open()->submit(submission, options));
}

Handle Client::receive_async(void* data, std::size_t count, DataType type, int peer,
                             std::int64_t tag, const OpOptions& options) {
  const std::uint64_t bytes = count * element_size(type);
  Submission submission{{Collective::broadcast, world_size(), count, element_size(type)},
                        type,
                        nullptr,
                        0,
                        0,
                        data,
                        0,
                        bytes};
  submission.transfer = {proto::TRANSFER_RECEIVE, peer, tag};
  return Handle(open()->submit(submission, options));
}

void Client::send(const void* data, std::size_t count, DataType type, int peer, std::int64_t tag,
                  const OpOptions& options) {
  send_async(data, count, type, peer, tag, options).wait();
}

void Client::receive(void* data, std::size_t count, DataType type, int peer, std::int64_t tag,
                     const OpOptions& options) {
  receive_async(data, count, type, peer, tag, options).wait();
}

Handle Client::reduce_async(void* data, std::size_t count, DataType type,
                            const OpOptions& options) {
  const std::uint64_t bytes = count * element_size(type);
  const OpShape shape{Collective::reduce, world_size(), count, element_size(type), options.root};
  // Only the root takes the result; the others' data stays as it was.
  const bool root = rank() == options.root;
  Submission submission{shape, type, data, 0, bytes, root ? data : nullptr, 0, root ? bytes : 0};
  return Handle(open()->submit(submission, options));
}

Handle Client::gather_async(const void* input, void* output, std::size_t count, DataType type,
                            const OpOptions& options) {
  const std::size_t size = element_size(type);
  const Chunk mine = balanced_chunk(count, world_size(), rank());
  const bool root = rank() == options.root;
  Submission submission{{Collective::gather, world_size(), count, size, options.root},
                        type,
                        input,
                        mine.offset * size,
                        mine.count * size,
                        root ? output : nullptr,
                        0,
                        root ? count * size : 0};
  return Handle(open()->submit(submission, options));
}

Handle Client::scatter_async(const void* input, void* output, std::size_t count, DataType type,
                             const OpOptions& options) {
  const std::size_t size = element_size(type);
  const Chunk mine = balanced_chunk(count, world_size(), rank());
  const bool root = rank() == options.root;
  Submission submission{{Collective::scatter, world_size(), count, size, options.root},
                        type,
                        root ? input : nullptr,
                        0,
                        root ? count * size : 0,
                        output,
                        mine.offset * size,
                        mine.count * size};
  return Handle(open()->submit(submission, options));
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
void Client::alltoallv(const void* input, std::span<const std::uint64_t> send_counts, void* output,
                       std::span<const std::uint64_t> recv_counts, DataType type,
                       const OpOptions& options) {
  alltoallv_async(input, send_counts, output, recv_counts, type, options).wait();
}

void Client::alltoall(const void* input, void* output, std::size_t block_count, DataType type,
                      const OpOptions& options) {
  alltoall_async(input, output, block_count, type, options).wait();
}
void Client::reduce(void* data, std::size_t count, DataType type, const OpOptions& options) {
  reduce_async(data, count, type, options).wait();
}
void Client::gather(const void* input, void* output, std::size_t count, DataType type,
                    const OpOptions& options) {
  gather_async(input, output, count, type, options).wait();
}
void Client::scatter(const void* input, void* output, std::size_t count, DataType type,
                     const OpOptions& options) {
  scatter_async(input, output, count, type, options).wait();
}
void Client::barrier(const OpOptions& options) {
  Submission submission{{Collective::barrier, world_size(), 0, 1}, DataType::u8};
  Handle(open()->submit(submission, options)).wait();
}

}  // namespace gradsync
