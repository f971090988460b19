#include "cli/npy.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <istream>
#include <limits>
#include <optional>
#include <ostream>
#include <string_view>
#include <utility>

#include "collective/check.h"

namespace gradsync::cli {

// Elements move between files and buffers byte for byte, with no swapping.
static_assert(std::endian::native == std::endian::little, ".npy I/O assumes a little-endian host");

namespace {

constexpr std::string_view kMagic = "\x93NUMPY";
// Magic, two version bytes, and the header length: 2 bytes in version 1.0, 4 in 2.0 and 3.0.
constexpr std::size_t kVersion1HeaderStart = 10;
constexpr std::size_t kLongestPreamble = 12;
constexpr std::size_t kAlignment = 64;
// NumPy's own limit (NPY_MAXDIMS, 64 since NumPy 2.0); it also keeps every header this writer
// produces far below version 1.0's 65535 bytes.
constexpr std::size_t kMaxDimensions = 64;
// np.save leaves room for the first axis to grow to this many digits, so that appending to a file
// can rewrite its header in place (GROWTH_AXIS_MAX_DIGITS in numpy/lib/format.py); matching it
// makes our files byte-identical to NumPy's.
constexpr std::size_t kGrowthAxisMaxDigits = 21;

struct Descr {
  std::string_view text;
  DataType type;
};
// The writer uses the first entry of each type, as NumPy does ('|u1', not '<u1').
constexpr Descr kDescrs[] = {
    {"<f2", DataType::f16},  {"<f4", DataType::f32},     {"<f8", DataType::f64},
    {"<i4", DataType::i32},  {"<i8", DataType::i64},     {"|u1", DataType::u8},
    {"<u1", DataType::u8},   {"|i1", DataType::i8},      {"<i1", DataType::i8},
    {"<i2", DataType::i16},  {"|b1", DataType::boolean}, {"<c8", DataType::c64},
    {"<c16", DataType::c128}};
constexpr std::string_view kSupportedDescrs =
    "'<f2' '<f4' '<f8' '<i4' '<i8' '|u1' '|i1' '<i2' '|b1' '<c8' '<c16'";

Status invalid(std::string message) { return {ErrorCode::invalid_argument, std::move(message)}; }

// Python's whitespace: the header is a Python expression.
bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

std::optional<std::uint64_t> checked_multiply(std::uint64_t a, std::uint64_t b) {
  if (b != 0 && a > std::numeric_limits<std::uint64_t>::max() / b) return std::nullopt;
  return a * b;
}

// Python's repr of a tuple of ints, as np.save writes it: "()", "(3,)", "(2, 3)".
std::string shape_repr(std::span<const std::uint64_t> shape) {
  std::string text = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) text += ", ";
    text += std::to_string(shape[i]);
  }
  if (shape.size() == 1) text += ",";
  return text + ")";
}

// The header as an error message shows it: printable, on one line, and not too long.
std::string shown_header(std::string_view header) {
  constexpr std::size_t kMaxShown = 200;
  while (!header.empty() && is_space(header.back())) header.remove_suffix(1);
  std::string text;
  for (char c : header.substr(0, kMaxShown)) text += (c >= ' ' && c <= '~') ? c : '?';
  if (header.size() > kMaxShown) text += "...";
  return text;
}

struct HeaderFields {
  std::string descr;
  bool fortran_order = false;
  std::vector<std::uint64_t> shape;
};

// NumPy reads the header with ast.literal_eval; this accepts the dict literals that it would accept
// and np.save (of any NumPy version, Python 2's "3L" included) writes.
class HeaderParser {
 public:
  explicit HeaderParser(std::string_view header) : header_(header) {}

  Status parse(HeaderFields& fields) {
    skip_space();
    if (!consume('{')) return invalid("the .npy header is not a dict: " + shown());
    bool has_descr = false;
    bool has_fortran_order = false;
    bool has_shape = false;
    skip_space();
    while (!consume('}')) {
      std::string key;
      if (!parse_string(key)) return malformed("a quoted key or '}'");
      skip_space();
      if (!consume(':')) return malformed("':'");
      skip_space();
      Status status;
      if (key == "descr") {
        status = parse_descr(fields.descr);
        has_descr = true;
      } else if (key == "fortran_order") {
        status = parse_bool(key, fields.fortran_order);
        has_fortran_order = true;
      } else if (key == "shape") {
        status = parse_shape(fields.shape);
        has_shape = true;
      } else {
        status = invalid("the .npy header has an unexpected key '" + key + "': " + shown());
      }
      if (!status.ok()) return status;
      skip_space();
      if (consume(',')) {
        skip_space();
      } else if (!peek('}')) {
        return malformed("',' or '}'");
      }
    }
    skip_space();
    if (position_ != header_.size()) return malformed("the end of the header after the dict");
    for (auto [present, key] :
         {std::pair{has_descr, "descr"}, std::pair{has_fortran_order, "fortran_order"},
          std::pair{has_shape, "shape"}}) {
      if (!present) {
        return invalid(std::string("the .npy header has no '") + key + "' key: " + shown());
      }
    }
    return {};
  }

 private:
  Status malformed(std::string_view expected) const {
    return invalid("malformed .npy header: expected " + std::string(expected) + " at byte " +
                   std::to_string(position_) + " of " + shown());
  }

  bool peek(char c) const { return position_ < header_.size() && header_[position_] == c; }
  bool consume(char c) {
    if (!peek(c)) return false;
    ++position_;
    return true;
  }
  bool consume(std::string_view word) {
    if (header_.substr(position_, word.size()) != word) return false;
    position_ += word.size();
    return true;
  }
  void skip_space() {
    while (position_ < header_.size() && is_space(header_[position_])) ++position_;
  }

  // A quoted string without escapes: the only strings in a header are keys and dtype names.
  bool parse_string(std::string& value) {
    if (!peek('\'') && !peek('"')) return false;
    const char quote = header_[position_];
    const std::size_t end = header_.find_first_of(std::string{quote, '\\', '\n'}, position_ + 1);
    if (end == std::string_view::npos || header_[end] != quote) return false;
    value = header_.substr(position_ + 1, end - position_ - 1);
    position_ = end + 1;
    return true;
  }

  Status parse_descr(std::string& descr) {
    if (peek('[')) {
      return invalid("structured dtypes are not supported (the .npy 'descr' is a list): " +
                     shown());
    }
    if (!parse_string(descr)) return malformed("a dtype string for 'descr'");
    return {};
  }

  Status parse_bool(const std::string& key, bool& value) {
    if (consume("True")) {
      value = true;
    } else if (consume("False")) {
      value = false;
    } else {
      return invalid("'" + key + "' is not True or False in the .npy header: " + shown());
    }
    return {};
  }

  Status parse_shape(std::vector<std::uint64_t>& shape) {
    if (!consume('(')) return invalid("'shape' is not a tuple in the .npy header: " + shown());
    shape.clear();
    bool trailing_comma = false;
    skip_space();
    while (!consume(')')) {
      if (peek('-')) return invalid("'shape' has a negative dimension: " + shown());
      std::uint64_t dimension = 0;
      const std::size_t first_digit = position_;
      for (; position_ < header_.size() && header_[position_] >= '0' && header_[position_] <= '9';
           ++position_) {
        const auto digit = static_cast<std::uint64_t>(header_[position_] - '0');
        const std::optional<std::uint64_t> shifted = checked_multiply(dimension, 10);
        if (!shifted || *shifted > std::numeric_limits<std::uint64_t>::max() - digit) {
          return invalid("'shape' has a dimension that does not fit in 64 bits: " + shown());
        }
        dimension = *shifted + digit;
      }
      if (position_ == first_digit) return malformed("a dimension in 'shape'");
      consume('L');  // Python 2's long literals
      shape.push_back(dimension);
      if (shape.size() > kMaxDimensions) {
        return invalid("'shape' has more than " + std::to_string(kMaxDimensions) +
                       " dimensions: " + shown());
      }
      skip_space();
      trailing_comma = consume(',');
      skip_space();
      if (!trailing_comma && !peek(')')) return malformed("',' or ')' in 'shape'");
    }
    // "(3)" is the int 3, not a tuple.
    if (shape.size() == 1 && !trailing_comma) {
      return invalid("'shape' is not a tuple in the .npy header: " + shown());
    }
    return {};
  }

  std::string shown() const { return shown_header(header_); }

  std::string_view header_;
  std::size_t position_ = 0;
};

Status parse_descr(const std::string& descr, DataType& type) {
  for (const Descr& entry : kDescrs) {
    if (entry.text == descr) {
      type = entry.type;
      return {};
    }
  }
  if (descr.starts_with('>')) {
    return invalid("dtype '" + descr + "' is big-endian; only little-endian data is supported");
  }
  return invalid("unsupported dtype '" + descr + "' (supported: " + std::string(kSupportedDescrs) +
                 ")");
}

std::string_view descr_of(DataType type) {
  for (const Descr& entry : kDescrs) {
    if (entry.type == type) return entry.text;
  }
  return {};
}

std::string describe_bytes(std::optional<std::uint64_t> bytes) {
  return bytes ? std::to_string(*bytes) + " bytes" : "more than 2^64 bytes";
}

// A directory opens as a file, and reading it then fails with a less helpful message.
Status open_input(const std::string& path, std::ifstream& file) {
  if (std::error_code error; std::filesystem::is_directory(path, error)) {
    return invalid(path + ": is a directory");
  }
  file.open(path, std::ios::binary);
  if (!file) return invalid(path + ": cannot open: " + std::strerror(errno));
  return {};
}

Status write_failed() { return invalid(std::string("write failed: ") + std::strerror(errno)); }

// Creates `path` and fills it with `write`; removes it if anything fails, since a partial file
// would look like a result.
template <typename Write>
Status write_file(const std::string& path, Write write) {
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  if (!file) return invalid(path + ": cannot create: " + std::strerror(errno));
  Status status = write(file);
  if (status.ok()) {
    file.close();
    if (!file) status = write_failed();
  }
  if (status.ok()) return {};
  file.close();
  std::error_code ignored;
  std::filesystem::remove(path, ignored);
  return invalid(path + ": " + status.message());
}

Status read_failed() {
  return invalid("read failed (an I/O error, or the file changed while it was read)");
}

}  // namespace

std::uint64_t element_count(std::span<const std::uint64_t> shape) {
  std::uint64_t count = 1;
  for (std::uint64_t dimension : shape) count *= dimension;
  return count;
}

Status read_npy(std::istream& in, NpyArray& array) {
  in.seekg(0, std::ios::end);
  const std::streamoff end = in.tellg();
  in.seekg(0, std::ios::beg);
  if (!in || end < 0) return invalid("cannot read a .npy file from a stream that is not seekable");
  const auto file_size = static_cast<std::uint64_t>(end);

  std::array<char, kLongestPreamble> preamble{};
  const auto preamble_size =
      static_cast<std::size_t>(std::min<std::uint64_t>(file_size, kLongestPreamble));
  if (!in.read(preamble.data(), static_cast<std::streamsize>(preamble_size))) return read_failed();
  const std::string_view start(preamble.data(), preamble_size);
  if (file_size == 0) return invalid("not a .npy file: it is empty");
  if (!start.starts_with(kMagic) && !kMagic.starts_with(start)) {
    return invalid("not a .npy file: it does not start with the magic string \\x93NUMPY");
  }
  const auto truncated_preamble = [&] {
    return invalid("truncated .npy header: the file ends after " + std::to_string(file_size) +
                   " bytes, inside the preamble");
  };
  if (file_size < kMagic.size() + 2) return truncated_preamble();  // also a prefix of the magic
  const auto major = static_cast<unsigned char>(start[kMagic.size()]);
  const auto minor = static_cast<unsigned char>(start[kMagic.size() + 1]);
  if (major < 1 || major > 3 || minor != 0) {
    return invalid("unsupported .npy format version " + std::to_string(major) + "." +
                   std::to_string(minor) + " (supported: 1.0, 2.0, 3.0)");
  }
  const std::size_t header_start = major == 1 ? kVersion1HeaderStart : kLongestPreamble;
  if (file_size < header_start) return truncated_preamble();
  std::uint64_t header_size = 0;
  for (std::size_t i = header_start; i-- > kMagic.size() + 2;) {
    header_size = header_size << 8 | static_cast<unsigned char>(start[i]);
  }
  if (header_size > file_size - header_start) {
    return invalid("truncated .npy header: it claims " + std::to_string(header_size) +
                   " bytes, but the file has only " + std::to_string(file_size - header_start) +
                   " after the preamble");
  }

  in.seekg(static_cast<std::streamoff>(header_start), std::ios::beg);
  std::string header(static_cast<std::size_t>(header_size), '\0');
  if (!in.read(header.data(), static_cast<std::streamsize>(header.size()))) return read_failed();
  HeaderFields fields;
  if (Status status = HeaderParser(header).parse(fields); !status.ok()) return status;
  NpyArray result;
  if (Status status = parse_descr(fields.descr, result.type); !status.ok()) return status;
  if (fields.fortran_order) {
    return invalid(
        "the array is in Fortran order ('fortran_order': True); only C order is "
        "supported");
  }

  std::optional<std::uint64_t> data_size = element_size(result.type);
  for (std::uint64_t dimension : fields.shape) {
    if (data_size) data_size = checked_multiply(*data_size, dimension);
  }
  // A zero dimension makes the array empty however large the others are.
  if (std::find(fields.shape.begin(), fields.shape.end(), 0) != fields.shape.end()) data_size = 0;
  const std::uint64_t available = file_size - header_start - header_size;
  const std::string what = "shape " + shape_repr(fields.shape) + " of '" + fields.descr + "'";
  if (!data_size || *data_size > available) {
    return invalid("truncated .npy data: " + what + " needs " + describe_bytes(data_size) +
                   ", but the file has only " + std::to_string(available) + " after the header");
  }
  if (*data_size < available) {
    return invalid("the .npy file is longer than its shape says: " + what + " needs " +
                   describe_bytes(data_size) + ", but the file has " + std::to_string(available) +
                   " after the header");
  }

  result.shape = std::move(fields.shape);
  result.data.resize(static_cast<std::size_t>(*data_size));
  if (!in.read(reinterpret_cast<char*>(result.data.data()),
               static_cast<std::streamsize>(result.data.size()))) {
    return read_failed();
  }
  array = std::move(result);
  return {};
}

Status write_npy(std::ostream& out, const NpyArray& array) {
  const std::string_view descr = descr_of(array.type);
  if (descr.empty()) {
    return invalid(std::string(name(array.type)) + " has no NumPy dtype; write it as a raw file");
  }
  GRADSYNC_CHECK_LE(array.shape.size(), kMaxDimensions);
  GRADSYNC_CHECK_EQ(array.data.size(), element_count(array.shape) * element_size(array.type));

  std::string header = "{'descr': '" + std::string(descr) +
                       "', 'fortran_order': False, 'shape': " + shape_repr(array.shape) + ", }";
  if (!array.shape.empty()) {
    header.append(kGrowthAxisMaxDigits - std::to_string(array.shape[0]).size(), ' ');
  }
  // Like np.save, always at least one space before the final newline (64 when already aligned).
  const std::size_t unpadded = kVersion1HeaderStart + header.size() + 1;
  header.append(kAlignment - unpadded % kAlignment, ' ');
  header += '\n';

  const auto header_size = static_cast<std::uint16_t>(header.size());
  std::string preamble(kMagic);
  preamble +=
      {'\x01', '\x00', static_cast<char>(header_size & 0xff), static_cast<char>(header_size >> 8)};
  out.write(preamble.data(), static_cast<std::streamsize>(preamble.size()));
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  out.write(reinterpret_cast<const char*>(array.data.data()),
            static_cast<std::streamsize>(array.data.size()));
  return out ? Status() : write_failed();
}

Status read_npy_file(const std::string& path, NpyArray& array) {
  std::ifstream file;
  if (Status status = open_input(path, file); !status.ok()) return status;
  if (Status status = read_npy(file, array); !status.ok()) {
    return invalid(path + ": " + status.message());
  }
  return {};
}

Status write_npy_file(const std::string& path, const NpyArray& array) {
  return write_file(path, [&](std::ostream& out) { return write_npy(out, array); });
}

Status read_raw_file(const std::string& path, DataType type, std::uint64_t count, NpyArray& array) {
  std::ifstream file;
  if (Status status = open_input(path, file); !status.ok()) return status;
  file.seekg(0, std::ios::end);
  const std::streamoff end = file.tellg();
  file.seekg(0, std::ios::beg);
  if (!file || end < 0) return invalid(path + ": " + read_failed().message());
  const auto file_size = static_cast<std::uint64_t>(end);
  const std::optional<std::uint64_t> data_size = checked_multiply(count, element_size(type));
  if (data_size != file_size) {
    return invalid(path + ": the raw file has " + std::to_string(file_size) + " bytes, but " +
                   std::to_string(count) + " " + std::string(name(type)) + " elements need " +
                   describe_bytes(data_size));
  }
  NpyArray result;
  result.type = type;
  result.shape = {count};
  result.data.resize(static_cast<std::size_t>(file_size));
  if (!file.read(reinterpret_cast<char*>(result.data.data()),
                 static_cast<std::streamsize>(result.data.size()))) {
    return invalid(path + ": " + read_failed().message());
  }
  array = std::move(result);
  return {};
}

Status write_raw_file(const std::string& path, std::span<const std::byte> data) {
  return write_file(path, [&](std::ostream& out) {
    out.write(reinterpret_cast<const char*>(data.data()),
              static_cast<std::streamsize>(data.size()));
    return out ? Status() : write_failed();
  });
}

}  // namespace gradsync::cli
