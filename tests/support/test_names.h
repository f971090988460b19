// Names for the cases of parameterised test suites. GoogleTest accepts only letters, digits and '_'
// in them, and ctest shows them, so each case is named after what it is, never by its index.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace gradsync::testing {

// `text` as a test name: each run of characters other than ASCII letters and digits becomes one
// '_', with none at either end, and a minus sign before a number becomes "minus" ("--sizes 4,zz"
// gives "sizes_4_zz", "--alpha-us -1" gives "alpha_us_minus_1"). A text with no letter or digit
// gives "", which GoogleTest refuses, naming the file and line of the INSTANTIATE_TEST_SUITE_P.
inline std::string identifier(std::string_view text) {
  const auto digit = [](char ch) { return ch >= '0' && ch <= '9'; };
  const auto alphanumeric = [&digit](char ch) {
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || digit(ch);
  };
  std::string result;
  bool separate = false;  // a '_' is due before the next letter or digit
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    const bool minus_sign = c == '-' && i + 1 < text.size() && digit(text[i + 1]) &&
                            (i == 0 || !alphanumeric(text[i - 1]));
    if (minus_sign) {
      if (!result.empty()) result += '_';
      result += "minus";
      separate = true;
    } else if (alphanumeric(c)) {
      if (separate) result += '_';
      separate = false;
      result += c;
    } else {
      separate = !result.empty();
    }
  }
  return result;
}

// A cluster test's host layout, `local_ranks[h]` ranks on host h: "hosts_2_1_3".
inline std::string layout_name(const std::vector<int>& local_ranks) {
  std::string text = "hosts";
  for (const int ranks : local_ranks) text += "_" + std::to_string(ranks);
  return text;
}

}  // namespace gradsync::testing
