// A runtime failure (docs/architecture.md §13): a code a program can branch on and a message a
// person can act on. It mirrors gradsync.proto's Status so that it crosses process boundaries
// unchanged.
#pragma once

#include <string>
#include <string_view>
#include <utility>

namespace gradsync {

enum class ErrorCode {
  ok,
  invalid_argument,
  mismatch,
  peer_lost,
  deadline_exceeded,
  protocol_error,
  aborted,
  unauthenticated,
  group_changed,  // the group has a new generation the client has not taken note of
  internal,       // the last: codes are checked against it
};

std::string_view name(ErrorCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(ErrorCode code, std::string message) : code_(code), message_(std::move(message)) {}

  bool ok() const { return code_ == ErrorCode::ok; }
  ErrorCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "mismatch: rank 2 submitted f32, rank 0 submitted f64"
  std::string to_string() const;

 private:
  ErrorCode code_ = ErrorCode::ok;
  std::string message_;
};

}  // namespace gradsync
