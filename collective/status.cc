#include "collective/status.h"

#include <cstdlib>

namespace gradsync {

std::string_view name(ErrorCode code) {
  switch (code) {
    case ErrorCode::ok:
      return "ok";
    case ErrorCode::invalid_argument:
      return "invalid argument";
    case ErrorCode::mismatch:
      return "mismatch";
    case ErrorCode::peer_lost:
      return "peer lost";
    case ErrorCode::deadline_exceeded:
      return "deadline exceeded";
    case ErrorCode::protocol_error:
      return "protocol error";
    case ErrorCode::aborted:
      return "aborted";
    case ErrorCode::unauthenticated:
      return "unauthenticated";
    case ErrorCode::group_changed:
      return "group changed";
    case ErrorCode::internal:
      return "internal error";
  }
  std::abort();
}

std::string Status::to_string() const {
  if (ok()) return "ok";
  return std::string(name(code_)) + ": " + message_;
}

}  // namespace gradsync
