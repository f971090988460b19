#include "daemon/control_channel.h"

#include <spdlog/spdlog.h>

#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>
#include <atomic>

#include "daemon/outbox.h"
#include "net/message_stream.h"
#include "net/socket.h"
#include "proto/convert.h"

namespace gradsync::daemon {

namespace {

using asio::ip::tcp;

// The coordinator takes none of our bytes for this long: it is as good as gone.
constexpr auto kSendTimeout = std::chrono::seconds(5);

}  // namespace

struct ControlChannel::Loop : std::enable_shared_from_this<ControlChannel::Loop> {
  Loop(asio::io_context& io, net::UniqueFd fd, std::chrono::milliseconds heartbeat_interval,
       engine::AbortSignal& abort_signal, std::function<void()> lost_callback, OnLoss on_loss,
       TableHandler table_handler)
      : socket(io),
        reader(fd.get()),
        heartbeat_timer(io),
        outbox(
            socket, kSendTimeout,
            [this](const std::string& why) {
              lose(Status(ErrorCode::aborted, "lost the coordinator: " + why), false);
            },
            [this] { last_sent = std::chrono::steady_clock::now().time_since_epoch(); }),
        interval(heartbeat_interval),
        abort(abort_signal),
        on_lost(std::move(lost_callback)),
        keeps_generation(on_loss == OnLoss::keep_generation),
        on_table(std::move(table_handler)) {
    const bool v6 = net::is_ipv6_socket(fd.get());
    socket.assign(v6 ? tcp::v6() : tcp::v4(), fd.release());
    heartbeat.mutable_heartbeat();
  }

  void start() {
    read();
    beat();
  }

  void read() {
    socket.async_wait(tcp::socket::wait_read,
                      [self = shared_from_this()](const asio::error_code& error) {
                        if (error) return;
                        self->take_messages();
                      });
  }

  void take_messages() {
    while (true) {
      proto::CoordinatorToWorker message;
      const Status status = reader.receive(message, net::Deadline(net::Clock::now()));
      if (status.code() == ErrorCode::deadline_exceeded) break;
      if (!status.ok()) {
        lose(Status(ErrorCode::aborted, "lost the coordinator: " + status.message()), false);
        return;
      }
      if (message.has_assignment()) {
        heartbeat.mutable_heartbeat()->set_rank(message.assignment().rank());
        heartbeat.mutable_heartbeat()->set_generation(message.assignment().generation());
      }
      {
        std::lock_guard lock(mutex);
        (proven && acted_on_as_it_comes(message) ? to_act : forming).push_back(std::move(message));
        arrived.notify_all();
      }
      act();
    }
    read();
  }

  // What the channel itself acts on, once the coordinator has proven itself on it (proven()).
  static bool acted_on_as_it_comes(const proto::CoordinatorToWorker& message) {
    return message.has_abort() || message.has_table_proposal() || message.has_table_switch();
  }

  // Acts on to_act's messages, in the order they came.
  void act() {
    while (true) {
      proto::CoordinatorToWorker message;
      {
        std::lock_guard lock(mutex);
        if (to_act.empty()) return;
        message = std::move(to_act.front());
        to_act.pop_front();
      }
      if (message.has_abort()) {
        // A group that is still forming waits for nothing more either.
        spdlog::warn("the coordinator aborted the group: {}", message.abort().reason().message());
        lose(from_proto(message.abort().reason()), true);
      } else {
        on_table(message);
      }
    }
  }

  void beat() {
    heartbeat_timer.expires_after(interval);
    heartbeat_timer.async_wait([self = shared_from_this()](const asio::error_code& error) {
      if (error || self->left) return;
      self->queue(self->heartbeat);
      self->beat();
    });
  }

  void queue(const proto::WorkerToCoordinator& message) {
    if (gone) return;  // nothing more reaches a lost coordinator; the queue must not grow
    std::string framed;
    if (Status status = net::frame_message(message, framed); !status.ok()) {
      lose(status, false);
      return;
    }
    outbox.push(std::move(framed), shared_from_this());
  }

  // `ended` says that the coordinator (or the worker) ended the generation, rather than that only
  // the connection was lost.
  void lose(const Status& reason, bool ended) {
    if (gone) return;
    gone = true;
    heartbeat_timer.cancel();
    if (ended || !keeps_generation) abort.raise(reason);
    {
      std::lock_guard lock(mutex);
      lost = reason;
      arrived.notify_all();
    }
    on_lost();
  }

  void stop() {
    asio::error_code ignored;
    socket.close(ignored);
    heartbeat_timer.cancel();
    outbox.cancel();
  }

  // Used on the event loop only.
  tcp::socket socket;
  net::MessageReader reader;
  asio::steady_timer heartbeat_timer;
  Outbox<tcp::socket> outbox;
  std::chrono::milliseconds interval;
  proto::WorkerToCoordinator heartbeat;
  bool gone = false;  // lost or aborted: nothing more is sent
  bool left = false;  // the worker left its generation: no more heartbeats
  engine::AbortSignal& abort;
  const std::function<void()> on_lost;
  std::atomic<bool> keeps_generation;
  const TableHandler on_table;

  // Shared with the worker's thread.
  std::atomic<std::chrono::steady_clock::duration> last_sent{
      std::chrono::steady_clock::now().time_since_epoch()};
  mutable std::mutex mutex;
  std::condition_variable arrived;
  std::deque<proto::CoordinatorToWorker> forming;
  Status lost;  // set once the coordinator is gone or has aborted the group
  bool proven = false;
  std::deque<proto::CoordinatorToWorker> to_act;  // on the event loop, by act()
};

Status ControlChannel::state(std::chrono::steady_clock::duration& heartbeat_age) const {
  heartbeat_age = std::chrono::steady_clock::now().time_since_epoch() - loop_->last_sent.load();
  std::lock_guard lock(loop_->mutex);
  return loop_->lost;
}

ControlChannel::ControlChannel(asio::io_context& io, net::UniqueFd socket,
                               std::chrono::milliseconds heartbeat_interval,
                               engine::AbortSignal& abort, std::function<void()> lost,
                               OnLoss on_loss, TableHandler table)
    : loop_(std::make_shared<Loop>(io, std::move(socket), heartbeat_interval, abort,
                                   std::move(lost), on_loss, std::move(table))) {
  asio::post(io, [loop = loop_] { loop->start(); });
}

ControlChannel::~ControlChannel() {
  asio::post(loop_->socket.get_executor(), [loop = loop_] { loop->stop(); });
}

void ControlChannel::interrupt(const Status& reason) {
  asio::post(loop_->socket.get_executor(), [loop = loop_, reason] { loop->lose(reason, true); });
}

void ControlChannel::leave(const Status& reason) {
  asio::post(loop_->socket.get_executor(), [loop = loop_, reason] {
    proto::WorkerToCoordinator message;
    to_proto(reason, *message.mutable_leave()->mutable_reason());
    loop->queue(message);
    loop->left = true;
    loop->heartbeat_timer.cancel();
  });
}

void ControlChannel::keep_generation_when_lost() { loop_->keeps_generation = true; }

void ControlChannel::proven() {
  {
    std::lock_guard lock(loop_->mutex);
    loop_->proven = true;
    // What came after the assignment but before this call is acted on first; what comes later is
    // queued behind it, so the order holds.
    std::erase_if(loop_->forming, [&](proto::CoordinatorToWorker& message) {
      if (!Loop::acted_on_as_it_comes(message)) return false;
      loop_->to_act.push_back(std::move(message));
      return true;
    });
  }
  asio::post(loop_->socket.get_executor(), [loop = loop_] { loop->act(); });
}

void ControlChannel::send(const proto::WorkerToCoordinator& message) {
  asio::post(loop_->socket.get_executor(), [loop = loop_, message] { loop->queue(message); });
}

Status ControlChannel::next(std::chrono::milliseconds timeout, const std::string& what,
                            proto::CoordinatorToWorker& message) {
  std::unique_lock lock(loop_->mutex);
  if (!loop_->arrived.wait_for(lock, timeout,
                               [this] { return !loop_->forming.empty() || !loop_->lost.ok(); })) {
    return Status(ErrorCode::deadline_exceeded,
                  "waited " + std::to_string(timeout.count()) + " ms for " + what);
  }
  if (loop_->forming.empty()) {
    return Status(loop_->lost.code(), loop_->lost.message() + " (waiting for " + what + ")");
  }
  message = std::move(loop_->forming.front());
  loop_->forming.pop_front();
  return {};
}

}  // namespace gradsync::daemon
