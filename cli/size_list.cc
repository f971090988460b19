#include "cli/size_list.h"

#include <charconv>
#include <limits>

namespace gradsync::cli {

std::optional<std::uint64_t> parse_size(std::string_view text) {
  std::uint64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end == text.data()) return std::nullopt;
  const std::string_view suffix(end, static_cast<std::size_t>(text.data() + text.size() - end));
  int shift = 0;
  if (suffix == "KiB") {
    shift = 10;
  } else if (suffix == "MiB") {
    shift = 20;
  } else if (suffix == "GiB") {
    shift = 30;
  } else if (!suffix.empty()) {
    return std::nullopt;
  }
  if (value > (std::numeric_limits<std::uint64_t>::max() >> shift)) return std::nullopt;
  return value << shift;
}

std::vector<std::string_view> split_commas(std::string_view text) {
  std::vector<std::string_view> entries;
  while (true) {
    const std::size_t comma = text.find(',');
    entries.push_back(text.substr(0, comma));
    if (comma == std::string_view::npos) return entries;
    text.remove_prefix(comma + 1);
  }
}

std::optional<std::vector<std::uint64_t>> parse_size_list(std::string_view text,
                                                          std::string& error) {
  std::vector<std::uint64_t> sizes;
  for (const std::string_view entry : split_commas(text)) {
    const auto size = parse_size(entry);
    if (!size) {
      // Appended: see parse_cpu_list on GCC 12's -Wrestrict.
      std::string message = "'";
      error = message.append(entry).append(
          "' is not a size in bytes (a whole number, optionally followed by KiB, MiB or GiB)");
      return std::nullopt;
    }
    sizes.push_back(*size);
  }
  return sizes;
}

}  // namespace gradsync::cli
