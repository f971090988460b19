// The tensor files of `gradsync submit`. NumPy .npy files hold little-endian, C-order arrays of the
// element types gradsync reduces; format versions 1.0, 2.0 and 3.0 are read, and 1.0 is written
// exactly as np.save writes it. bf16 has no NumPy dtype, so it travels in raw files.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <span>
#include <string>
#include <vector>

#include "collective/status.h"
#include "collective/types.h"

namespace gradsync::cli {

struct NpyArray {
  DataType type = DataType::f32;
  std::vector<std::uint64_t> shape;  // empty: a 0-d array, which holds one element
  std::vector<std::byte> data;       // element_count(shape) elements, little-endian, C order
};

// The product of the dimensions (1 for a 0-d array). Shapes read by read_npy never overflow it.
std::uint64_t element_count(std::span<const std::uint64_t> shape);

// Reads a whole .npy file from `in`, which must be seekable: every length the header claims is
// checked against the size of the stream before anything is allocated. Errors are
// invalid_argument and say what is wrong with the file.
Status read_npy(std::istream& in, NpyArray& array);

// Writes `array` as a version 1.0 file with np.save's header layout (data aligned to 64 bytes).
// `array.data` must hold element_count(array.shape) elements; bf16 is invalid_argument.
Status write_npy(std::ostream& out, const NpyArray& array);

// The same on the file at `path`; messages start with the path. A file that cannot be written
// completely is removed.
Status read_npy_file(const std::string& path, NpyArray& array);
Status write_npy_file(const std::string& path, const NpyArray& array);

// Raw files, the only form bf16 takes: `count` elements of `type`, little-endian, and nothing else,
// so the file's size must be exactly their size. The array read is 1-D.
Status read_raw_file(const std::string& path, DataType type, std::uint64_t count, NpyArray& array);
Status write_raw_file(const std::string& path, std::span<const std::byte> data);

}  // namespace gradsync::cli
