// Spinning on the clients' op queues (net/op_queue.h), on the op thread's event loop: after serving
// a client the server looks at every op queue for a while (the spin), so that an op published soon
// needs no doorbell; then it says in each queue that it sleeps, and a client rings its doorbell on
// the socket. The event loop turns between looks, so sockets and timers are served meanwhile.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>

#include "net/deadline.h"

namespace asio {
class io_context;
}

namespace gradsync::daemon {

class ClientSession;

class OpQueueSpinner {
 public:
  // Serves the ops the clients have published in their queues; true if there were any.
  using ServeQueues = std::function<bool()>;

  OpQueueSpinner(asio::io_context& io, std::chrono::microseconds spin, ServeQueues serve);

  // `owner` keeps this spinner alive while a look is posted; set before the first stay_awake().
  void set_owner(std::weak_ptr<void> owner) { owner_ = std::move(owner); }

  // A client with an op queue, attached now: its queue says whether the server sleeps.
  void add(const std::shared_ptr<ClientSession>& session);
  void remove(const ClientSession* session);
  void clear();

  // After serving a client: spins for another spin from now.
  void stay_awake();

 private:
  void look_once();
  // Says in every op queue whether the server sleeps; true if one holds an op.
  bool set_queues_asleep(bool asleep);
  // Runs `work` on the event loop's next turn, unless the owner is gone.
  template <typename Work>
  void post(Work work);

  asio::io_context& io_;
  const std::chrono::microseconds spin_;
  const ServeQueues serve_;
  std::weak_ptr<void> owner_;
  std::map<const ClientSession*, std::shared_ptr<ClientSession>> queued_;  // those with a queue
  bool spinning_ = false;
  net::Clock::time_point awake_until_;
};

}  // namespace gradsync::daemon
