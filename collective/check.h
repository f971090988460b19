// Invariant checks for programming errors (docs/architecture.md §13): a broken invariant aborts
// loudly and prints both values. Runtime failures (a lost peer, a bad frame) never use these; they
// travel as a Status.
#pragma once

#include <sstream>
#include <string>

namespace gradsync::detail {

[[noreturn]] void check_failed(const char* file, int line, const std::string& message);

template <typename A, typename B>
std::string describe_comparison(const char* expression, const A& lhs, const B& rhs) {
  std::ostringstream text;
  text << expression << " (" << lhs << " vs " << rhs << ")";
  return text.str();
}

}  // namespace gradsync::detail

#define GRADSYNC_CHECK(condition)                                                       \
  do {                                                                                  \
    if (!(condition)) ::gradsync::detail::check_failed(__FILE__, __LINE__, #condition); \
  } while (false)

#define GRADSYNC_CHECK_OP(a, op, b)                                                    \
  do {                                                                                 \
    const auto& gradsync_check_a = (a);                                                \
    const auto& gradsync_check_b = (b);                                                \
    if (!(gradsync_check_a op gradsync_check_b)) {                                     \
      ::gradsync::detail::check_failed(                                                \
          __FILE__, __LINE__,                                                          \
          ::gradsync::detail::describe_comparison(#a " " #op " " #b, gradsync_check_a, \
                                                  gradsync_check_b));                  \
    }                                                                                  \
  } while (false)

#define GRADSYNC_CHECK_EQ(a, b) GRADSYNC_CHECK_OP(a, ==, b)
#define GRADSYNC_CHECK_NE(a, b) GRADSYNC_CHECK_OP(a, !=, b)
#define GRADSYNC_CHECK_LT(a, b) GRADSYNC_CHECK_OP(a, <, b)
#define GRADSYNC_CHECK_LE(a, b) GRADSYNC_CHECK_OP(a, <=, b)
#define GRADSYNC_CHECK_GT(a, b) GRADSYNC_CHECK_OP(a, >, b)
#define GRADSYNC_CHECK_GE(a, b) GRADSYNC_CHECK_OP(a, >=, b)
