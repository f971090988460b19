#include "daemon/op_queue_spinner.h"

#include <algorithm>
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <thread>

#include "daemon/client_session.h"

namespace gradsync::daemon {

OpQueueSpinner::OpQueueSpinner(asio::io_context& io, std::chrono::microseconds spin,
                               ServeQueues serve)
    : io_(io), spin_(spin), serve_(std::move(serve)) {}

void OpQueueSpinner::add(const std::shared_ptr<ClientSession>& session) {
  session->queue()->set_asleep(!spinning_);
  queued_[session.get()] = session;
}

void OpQueueSpinner::remove(const ClientSession* session) { queued_.erase(session); }

void OpQueueSpinner::clear() { queued_.clear(); }

void OpQueueSpinner::stay_awake() {
  awake_until_ = net::Clock::now() + spin_;
  if (spinning_) return;
  spinning_ = true;
  set_queues_asleep(false);
  look_once();
}

void OpQueueSpinner::look_once() {
  const bool published = std::any_of(queued_.begin(), queued_.end(), [](const auto& entry) {
    return entry.second->queue()->has_ops();
  });
  if (published && serve_()) stay_awake();  // spinning already: only the end moves
  if (net::Clock::now() < awake_until_) {
    std::this_thread::yield();  // a client may share this CPU
    post([this] { look_once(); });
    return;
  }
  spinning_ = false;
  // An op published before its client could see the flag rings no doorbell.
  if (set_queues_asleep(true)) post([this] { stay_awake(); });
}

bool OpQueueSpinner::set_queues_asleep(bool asleep) {
  bool published = false;
  for (const auto& [key, session] : queued_) {
    session->queue()->set_asleep(asleep);
    published = published || session->queue()->has_ops();
  }
  return published;
}

template <typename Work>
void OpQueueSpinner::post(Work work) {
  asio::post(io_, [owner = owner_, work] {
    if (const auto alive = owner.lock()) work();
  });
}

}  // namespace gradsync::daemon
