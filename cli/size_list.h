// Lists and byte sizes given on the command line: "a,b,c"; "1000", "64KiB", "4MiB", "1GiB".
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gradsync::cli {

std::optional<std::uint64_t> parse_size(std::string_view text);

// The comma-separated entries of `text`, empty ones included ("a,,b" is three).
std::vector<std::string_view> split_commas(std::string_view text);

// A comma-separated list of sizes; on failure, `error` says which entry is wrong.
std::optional<std::vector<std::uint64_t>> parse_size_list(std::string_view text,
                                                          std::string& error);

}  // namespace gradsync::cli
