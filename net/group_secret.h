// The group secret (docs/architecture.md §11): every process of a group reads the same bytes from a
// file, and proves that it knows them with HMAC-SHA256 over fresh nonces, so that a stranger on the
// network can neither join a group nor pose as one of its peers. Proofs are made at connect time
// only; nothing on the data path pays for them.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>

#include "collective/status.h"

namespace gradsync::net {

// Fewer bytes than this are refused: a secret must not be guessable.
inline constexpr std::size_t kMinSecretBytes = 16;
inline constexpr std::size_t kNonceBytes = 16;

class GroupSecret {
 public:
  GroupSecret() = default;  // none: nothing is proven, and nothing is asked of the other side
  explicit GroupSecret(std::string bytes) : bytes_(std::move(bytes)) {}

  // The file's bytes, less one trailing newline; refuses a file that is missing or shorter than
  // kMinSecretBytes. `warning` says so if other users may read the file (a container's mounted
  // secret usually is), and is empty otherwise.
  static Status load(const std::string& path, GroupSecret& secret, std::string& warning);

  // Writes a new random secret (64 hexadecimal digits) to a new file of mode 0600.
  static Status create_file(const std::string& path);

  bool empty() const { return bytes_.empty(); }

  // HMAC-SHA256 over `purpose` and `fields`, each prefixed with its length (so that no two lists
  // of fields read the same); 32 bytes.
  std::string prove(std::string_view purpose, std::initializer_list<std::string_view> fields) const;

 private:
  std::string bytes_;
};

// Whether two proofs are equal, compared in constant time.
bool same_proof(std::string_view a, std::string_view b);

// kNonceBytes from the system's random generator.
std::string make_nonce();

// A number as the bytes a proof covers.
std::string proof_field(std::uint64_t value);

}  // namespace gradsync::net
