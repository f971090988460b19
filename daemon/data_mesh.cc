#include "daemon/data_mesh.h"

#include <arpa/inet.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/post.hpp>
#include <asio/read.hpp>
#include <asio/steady_timer.hpp>
#include <asio/write.hpp>
#include <chrono>
#include <cstring>
#include <mutex>
#include <optional>
#include <set>

#include "collective/group_plan.h"
#include "daemon/accept_loop.h"
#include "daemon/openings_per_address.h"
#include "engine/frame.h"

namespace gradsync::daemon {

namespace {

using asio::ip::tcp;
using engine::FrameHeader;
using engine::FrameKind;

constexpr auto kHelloTimeout = std::chrono::seconds(2);
// Connections that one address other than the group's may be opening at once.
constexpr int kOpeningsPerStranger = 128;

// With a group secret, the two ends of a data connection prove it to each other, each over the
// generation, its own rank, the other's, the other's nonce and its own: the accepting rank first,
// in its answer to the hello, then the connecting rank.
enum class End { accepting, connecting };

std::string mesh_proof(const net::GroupSecret& secret, End end, std::uint64_t generation,
                       int prover, int other, Lane lane, std::string_view other_nonce,
                       std::string_view own_nonce) {
  return secret.prove(
      end == End::accepting ? "gradsync data accept" : "gradsync data connect",
      {net::proof_field(generation), net::proof_field(static_cast<std::uint64_t>(prover)),
       net::proof_field(static_cast<std::uint64_t>(other)),
       net::proof_field(static_cast<std::uint64_t>(lane)), other_nonce, own_nonce});
}

constexpr std::size_t kProofBytes = 32;  // HMAC-SHA256

// Opens a connection of `lane` to `peer`, a lower rank: the hello (with a nonce when there is a
// secret), then, with a secret, the peer's proof checked and this rank's sent.
Status greet(int fd, int peer, Lane lane, const MeshPlan& plan, const net::GroupSecret& secret,
             net::Deadline deadline) {
  const std::string nonce = secret.empty() ? std::string() : net::make_nonce();
  FrameHeader hello;
  hello.kind = FrameKind::hello;
  hello.generation = plan.generation;
  hello.op.place = static_cast<std::uint64_t>(plan.rank);
  hello.round = static_cast<std::uint32_t>(lane);
  hello.length = nonce.size();
  hello.descriptor.count = static_cast<std::uint64_t>(plan.world_size);
  if (Status status = net::write_all(fd, engine::encode(hello), deadline); !status.ok()) {
    return status;
  }
  if (secret.empty()) return {};
  if (Status status = net::write_all(fd, std::as_bytes(std::span(nonce)), deadline); !status.ok()) {
    return status;
  }
  std::string answer(net::kNonceBytes + kProofBytes, '\0');
  const auto unproven = [&](const std::string& why) {
    return Status(ErrorCode::unauthenticated, "rank " + std::to_string(peer) + " at " +
                                                  plan.peers[peer].to_string() +
                                                  " does not prove the group secret (" + why + ")");
  };
  if (Status status = net::read_exact(fd, std::as_writable_bytes(std::span(answer)), deadline);
      !status.ok()) {
    return unproven("no answer to the hello: " + status.message());
  }
  const std::string_view peer_nonce = std::string_view(answer).substr(0, net::kNonceBytes);
  if (!net::same_proof(std::string_view(answer).substr(net::kNonceBytes),
                       mesh_proof(secret, End::accepting, plan.generation, peer, plan.rank, lane,
                                  nonce, peer_nonce))) {
    return unproven("a wrong proof");
  }
  const std::string proof = mesh_proof(secret, End::connecting, plan.generation, plan.rank, peer,
                                       lane, peer_nonce, nonce);
  return net::write_all(fd, std::as_bytes(std::span(proof)), deadline);
}

// One form of an IP address however it is written (an IPv4 one as its IPv6-mapped form); none for
// a host name.
std::optional<std::string> ip_key(const std::string& host) {
  in6_addr address{};
  in_addr v4{};
  if (::inet_pton(AF_INET, host.c_str(), &v4) == 1) {
    address.s6_addr[10] = 0xff;
    address.s6_addr[11] = 0xff;
    std::memcpy(&address.s6_addr[12], &v4, sizeof v4);
  } else if (::inet_pton(AF_INET6, host.c_str(), &address) != 1) {
    return std::nullopt;
  }
  return std::string(reinterpret_cast<const char*>(&address), sizeof address);
}

std::string address_key(const std::string& host) { return ip_key(host).value_or(host); }

// Whether `from` (HOST:PORT of a connection) comes from `expected`'s host, where that host is an
// IP address; a peer table that names hosts by name is not compared.
bool comes_from(const std::string& from, const net::HostPort& expected) {
  net::HostPort source;
  if (!net::parse_host_port(from, source).ok()) return false;
  const std::optional<std::string> wanted = ip_key(expected.host);
  return !wanted || ip_key(source.host) == wanted;
}

// The addresses of the higher ranks of `plan`, which connect to this one.
std::set<std::string> connecting_addresses(const MeshPlan& plan) {
  std::set<std::string> addresses;
  for (int rank = plan.rank + 1; rank < plan.world_size; ++rank) {
    addresses.insert(address_key(plan.peers[rank].host));
  }
  return addresses;
}

// Names the rank a hello comes from and the lane it opens, or says why it is not one of ours.
Status check_hello(const engine::EncodedHeader& bytes, const MeshPlan& plan, int& rank,
                   Lane& lane) {
  FrameHeader hello;
  if (Status status = engine::decode(bytes, hello); !status.ok()) return status;
  if (hello.kind != FrameKind::hello) {
    return Status(ErrorCode::protocol_error, "the first frame is not a hello");
  }
  if (hello.generation != plan.generation ||
      hello.descriptor.count != static_cast<std::uint64_t>(plan.world_size)) {
    return Status(ErrorCode::protocol_error,
                  "hello for generation " + std::to_string(hello.generation) + " of " +
                      std::to_string(hello.descriptor.count) + " ranks; this group is generation " +
                      std::to_string(plan.generation) + " of " + std::to_string(plan.world_size));
  }
  if (hello.op.place <= static_cast<std::uint64_t>(plan.rank) ||
      hello.op.place >= static_cast<std::uint64_t>(plan.world_size)) {
    return Status(ErrorCode::protocol_error, "hello from rank " + std::to_string(hello.op.place) +
                                                 ", which does not connect to rank " +
                                                 std::to_string(plan.rank));
  }
  if (hello.round >= kLanes) {
    return Status(ErrorCode::protocol_error, "hello for lane " + std::to_string(hello.round) +
                                                 "; there are " + std::to_string(kLanes));
  }
  rank = static_cast<int>(hello.op.place);
  lane = static_cast<Lane>(hello.round);
  return {};
}

// A connection whose hello is still being read, or its proof (with a group secret).
struct Arrival {
  Arrival(tcp::socket socket_in, std::string from_in,
          std::unique_ptr<OpeningsPerAddress::Opening> opening_in)
      : socket(std::move(socket_in)),
        from(std::move(from_in)),
        opening(std::move(opening_in)),
        deadline(socket.get_executor()) {}
  tcp::socket socket;
  std::string from;
  std::unique_ptr<OpeningsPerAddress::Opening> opening;  // its place among its address's openings
  engine::EncodedHeader hello{};
  std::string nonce;      // the connecting rank's, from the hello's payload
  std::string answer;     // this rank's nonce and proof
  std::string own_nonce;  // the first part of `answer`
  std::string proof;      // the connecting rank's
  asio::steady_timer deadline;
};

// Why a step of a connection's opening (hello, answer, proof) failed.
Status step_failure(const asio::error_code& error) {
  return Status(ErrorCode::protocol_error,
                error == asio::error::operation_aborted
                    ? "nothing within " + std::to_string(kHelloTimeout.count()) + " s"
                    : "the connection failed: " + error.message());
}

}  // namespace

struct DataPort::Loop : std::enable_shared_from_this<DataPort::Loop> {
  Loop(asio::io_context& io, net::UniqueFd listener, net::GroupSecret secret_in)
      : acceptor(io), backoff(io), secret(std::move(secret_in)) {
    const bool v6 = net::is_ipv6_socket(listener.get());
    acceptor.assign(v6 ? tcp::v6() : tcp::v4(), listener.release());
  }

  void accept() {
    accept_forever(acceptor, backoff, "a data connection", shared_from_this(),
                   [this](tcp::socket socket) { take(std::move(socket)); });
  }

  void take(tcp::socket socket) {
    const net::HostPort from = net::peer_address(socket.native_handle());
    if (auto opening = openings->begin(address_key(from.host))) {
      read_hello(
          std::make_shared<Arrival>(std::move(socket), from.to_string(), std::move(opening)));
    } else if (crowded_refusals++ % 1000 == 0) {
      spdlog::warn(
          "rejected a data connection from {}: its address already opens {} (logged once per "
          "thousand)",
          from.to_string(), kOpeningsPerStranger);
    }
  }

  // Closes the arrival's socket if the next step takes longer than kHelloTimeout.
  static void arm(const std::shared_ptr<Arrival>& arrival) {
    arrival->deadline.expires_after(kHelloTimeout);
    arrival->deadline.async_wait([arrival](const asio::error_code& error) {
      if (error) return;
      asio::error_code ignored;
      arrival->socket.close(ignored);
    });
  }

  void read_hello(const std::shared_ptr<Arrival>& arrival) {
    arm(arrival);
    asio::async_read(
        arrival->socket, asio::buffer(arrival->hello),
        [self = shared_from_this(), arrival](const asio::error_code& error, std::size_t) {
          FrameHeader header;
          Status read = error ? step_failure(error) : engine::decode(arrival->hello, header);
          if (!read.ok() || header.length == 0) {
            arrival->deadline.cancel();
            self->take(arrival, read);
            return;
          }
          arrival->nonce.resize(header.length);
          asio::async_read(arrival->socket, asio::buffer(arrival->nonce),
                           [self, arrival](const asio::error_code& failed, std::size_t) {
                             arrival->deadline.cancel();
                             self->take(arrival, failed ? step_failure(failed) : Status());
                           });
        });
  }

  void take(const std::shared_ptr<Arrival>& arrival, const Status& read) {
    std::lock_guard lock(mutex);
    if (read.ok() && !planned) {
      // A higher rank that got its assignment first: its hello is judged once ours is here.
      if (early.size() < static_cast<std::size_t>(kMaxWorldSize)) {
        early.push_back(arrival);
        return;
      }
      spdlog::warn("rejected a data connection from {}: {} hellos already wait for the group",
                   arrival->from, early.size());
      return;
    }
    take_hello(arrival, read);
  }

  // The hellos that came before the plan.
  void take_early() {
    std::lock_guard lock(mutex);
    for (const auto& arrival : early) take_hello(arrival, {});
    early.clear();
  }

  // Judges a hello read to its end (or `read`, why it was not); with a group secret, goes on to
  // the exchange of proofs. Called with `mutex` held.
  void take_hello(const std::shared_ptr<Arrival>& arrival, const Status& read) {
    int rank = -1;
    Lane lane = Lane::collectives;
    Status hello = read.ok() ? check_hello(arrival->hello, plan, rank, lane) : read;
    if (hello.ok() && !comes_from(arrival->from, plan.peers[rank])) {
      hello = Status(ErrorCode::unauthenticated, "a hello from rank " + std::to_string(rank) +
                                                     ", whose address is " +
                                                     plan.peers[rank].to_string());
    }
    if (hello.ok() && secret.empty() != arrival->nonce.empty()) {
      hello = Status(ErrorCode::unauthenticated, secret.empty()
                                                     ? "a hello with a nonce in a group without "
                                                       "a secret"
                                                     : "a hello without the group secret's nonce");
    }
    if (!hello.ok()) {
      reject(*arrival, hello);
    } else if (secret.empty()) {
      admit(*arrival, rank, lane);
    } else {
      prove_and_check(arrival, rank, lane);
    }
  }

  // Answers the hello with this rank's nonce and proof, then reads and checks the connecting
  // rank's proof.
  void prove_and_check(const std::shared_ptr<Arrival>& arrival, int rank, Lane lane) {
    arrival->own_nonce = net::make_nonce();
    arrival->answer =
        arrival->own_nonce + mesh_proof(secret, End::accepting, plan.generation, plan.rank, rank,
                                        lane, arrival->nonce, arrival->own_nonce);
    arrival->proof.resize(kProofBytes);
    arm(arrival);
    asio::async_write(
        arrival->socket, asio::buffer(arrival->answer),
        [self = shared_from_this(), arrival, rank, lane](const asio::error_code& error,
                                                         std::size_t) {
          if (error) {
            arrival->deadline.cancel();
            std::lock_guard lock(self->mutex);
            self->reject(*arrival, step_failure(error));
            return;
          }
          asio::async_read(
              arrival->socket, asio::buffer(arrival->proof),
              [self, arrival, rank, lane](const asio::error_code& failed, std::size_t) {
                arrival->deadline.cancel();
                std::lock_guard lock(self->mutex);
                if (failed) {
                  self->reject(*arrival, step_failure(failed));
                } else if (!net::same_proof(arrival->proof,
                                            mesh_proof(self->secret, End::connecting,
                                                       self->plan.generation, rank, self->plan.rank,
                                                       lane, arrival->own_nonce, arrival->nonce))) {
                  self->reject(*arrival, Status(ErrorCode::unauthenticated,
                                                "it does not prove the group secret"));
                } else {
                  self->admit(*arrival, rank, lane);
                }
              });
        });
  }

  static void reject(Arrival& arrival, const Status& why) {
    spdlog::warn("rejected a data connection from {}: {}", arrival.from, why.message());
    asio::error_code ignored;
    arrival.socket.close(ignored);
  }

  // Takes the connection as rank `rank`'s of `lane`, unless that rank has one. Called with `mutex`
  // held.
  void admit(Arrival& arrival, int rank, Lane lane) {
    net::UniqueFd& place = accepted.of(lane)[rank];
    if (formed || place.valid()) {
      reject(arrival, Status(ErrorCode::protocol_error, "rank " + std::to_string(rank) +
                                                            " is already connected on that lane"));
      return;
    }
    // The deadline may have closed the socket in the same round as the last read completed.
    asio::error_code closed;
    const int fd = arrival.socket.release(closed);
    if (closed) {
      reject(arrival, step_failure(asio::error::operation_aborted));
      return;
    }
    place = net::UniqueFd(fd);
    net::tune_for_data_plane(place.get());
    if (--missing == 0) signal_all_arrived();
  }

  tcp::acceptor acceptor;
  asio::steady_timer backoff;
  const net::GroupSecret secret;
  const std::shared_ptr<OpeningsPerAddress> openings =
      std::make_shared<OpeningsPerAddress>(kOpeningsPerStranger);
  std::uint64_t crowded_refusals = 0;  // connections closed because their address had its share

  void signal_all_arrived() const {
    const std::uint64_t one = 1;
    (void)!::write(all_arrived.get(), &one, sizeof one);
  }

  std::mutex mutex;  // guards what the forming thread reads and writes
  MeshPlan plan;
  bool planned = false;                         // whether `plan` is set
  std::vector<std::shared_ptr<Arrival>> early;  // hellos read before `plan` was set
  net::UniqueFd all_arrived{
      ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)};  // readable once none is missing
  MeshSockets accepted;                           // by lane and rank: the higher ranks
  int missing = 0;
  bool formed = false;  // from then on, every connection is turned away
};

DataPort::DataPort(asio::io_context& io, net::UniqueFd listener, net::GroupSecret secret)
    : loop_(std::make_shared<Loop>(io, std::move(listener), std::move(secret))) {
  // From the start, not only once the group has formed: strangers that connect earlier are read
  // and closed on their own deadlines instead of filling the listen queue.
  asio::post(io, [loop = loop_] { loop->accept(); });
}

DataPort::~DataPort() {
  asio::post(loop_->acceptor.get_executor(), [loop = loop_] {
    asio::error_code ignored;
    loop->acceptor.close(ignored);
    loop->backoff.cancel();
  });
}

void DataPort::expect_new_plan() {
  std::lock_guard lock(loop_->mutex);
  loop_->planned = false;
  loop_->formed = false;
  loop_->accepted = {};
  std::uint64_t signalled = 0;  // by the last generation's last arrival
  (void)!::read(loop_->all_arrived.get(), &signalled, sizeof signalled);
}

Status DataPort::form_mesh(const MeshPlan& plan, net::Deadline deadline, int cancel_fd,
                           MeshSockets& sockets) {
  {
    std::lock_guard lock(loop_->mutex);
    loop_->plan = plan;
    loop_->planned = true;
    loop_->openings->set_group_addresses(connecting_addresses(plan));
    loop_->accepted = MeshSockets::for_world(plan.world_size);
    loop_->missing = static_cast<int>(kLanes) * (plan.world_size - 1 - plan.rank);
    if (loop_->missing == 0) loop_->signal_all_arrived();
  }
  asio::post(loop_->acceptor.get_executor(), [loop = loop_] { loop->take_early(); });
  sockets = MeshSockets::for_world(plan.world_size);
  for (int peer = 0; peer < plan.rank; ++peer) {
    for (const Lane lane : {Lane::collectives, Lane::point_to_point}) {
      net::UniqueFd& socket = sockets.of(lane)[peer];
      // The lower rank may still be starting.
      if (Status status = net::connect_tcp_retrying(plan.peers[peer], deadline, socket, cancel_fd);
          !status.ok()) {
        if (status.code() == ErrorCode::aborted) return status;
        return Status(ErrorCode::peer_lost, "cannot reach rank " + std::to_string(peer) + " at " +
                                                plan.peers[peer].to_string() + ": " +
                                                status.message());
      }
      net::tune_for_data_plane(socket.get());
      if (Status hello = greet(socket.get(), peer, lane, plan, loop_->secret, deadline);
          !hello.ok()) {
        return hello;
      }
    }
  }
  // The higher ranks connect on the event loop, which signals `all_arrived` once the last has.
  if (Status waited = net::wait_unless_cancelled(loop_->all_arrived.get(), POLLIN, deadline,
                                                 cancel_fd, "forming the data mesh");
      waited.code() == ErrorCode::aborted) {
    return waited;
  }
  std::unique_lock lock(loop_->mutex);
  loop_->formed = true;
  if (loop_->missing > 0) {
    return Status(ErrorCode::peer_lost,
                  std::to_string(loop_->missing) + " connections of higher ranks never came");
  }
  for (const Lane lane : {Lane::collectives, Lane::point_to_point}) {
    for (int peer = plan.rank + 1; peer < plan.world_size; ++peer) {
      sockets.of(lane)[peer] = std::move(loop_->accepted.of(lane)[peer]);
    }
  }
  return {};
}

}  // namespace gradsync::daemon
