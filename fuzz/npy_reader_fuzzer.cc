// The .npy reader of `gradsync submit` on arbitrary files: it refuses what is wrong with a message
// and never allocates more than the file could hold; what it accepts it can write back.
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>

#include "cli/npy.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace gradsync::cli;
  std::istringstream in(std::string(reinterpret_cast<const char*>(data), size));
  NpyArray array;
  if (!read_npy(in, array).ok()) return 0;
  if (array.data.size() != element_count(array.shape) * gradsync::element_size(array.type)) {
    __builtin_trap();
  }
  std::ostringstream out;
  (void)write_npy(out, array);
  return 0;
}
