// The accept loop of a listening socket on an event loop: every connection is handed over as it
// comes, and after a failed accept (the descriptor limit, say) the loop waits rather than spin on
// the error. It ends when the acceptor is closed.
#pragma once

#include <spdlog/spdlog.h>

#include <asio/steady_timer.hpp>
#include <chrono>
#include <memory>
#include <string>

namespace gradsync::daemon {

inline constexpr auto kAcceptBackoff = std::chrono::milliseconds(100);

// Accepts on `acceptor` until it is closed, handing each socket to `take`; `what` names the
// connections in the warning about a failed accept. `owner` keeps the acceptor, the timer and
// what `take` uses alive while the loop runs (null where they outlive the event loop).
template <typename Acceptor, typename Take>
void accept_forever(Acceptor& acceptor, asio::steady_timer& backoff, std::string what,
                    std::shared_ptr<void> owner, Take take) {
  acceptor.async_accept([&acceptor, &backoff, what = std::move(what), owner = std::move(owner),
                         take](const asio::error_code& error,
                               typename Acceptor::protocol_type::socket socket) mutable {
    if (error == asio::error::operation_aborted) return;
    if (error) {
      spdlog::warn("cannot accept {}: {}", what, error.message());
      backoff.expires_after(kAcceptBackoff);
      backoff.async_wait([&acceptor, &backoff, what, owner, take](const asio::error_code& waited) {
        if (!waited) accept_forever(acceptor, backoff, what, owner, take);
      });
      return;
    }
    take(std::move(socket));
    accept_forever(acceptor, backoff, std::move(what), std::move(owner), std::move(take));
  });
}

}  // namespace gradsync::daemon
