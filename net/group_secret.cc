#include "net/group_secret.h"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iterator>

namespace gradsync::net {

Status GroupSecret::load(const std::string& path, GroupSecret& secret, std::string& warning) {
  const auto refuse = [&](const std::string& why) {
    return Status(ErrorCode::invalid_argument, "secret file " + path + ": " + why);
  };
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) return refuse("cannot read it");
  warning = (info.st_mode & 0077) != 0
                ? "secret file " + path + ": other users may read it (chmod 600 " + path + ")"
                : "";
  std::ifstream file(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  if (!file.good() && !file.eof()) return refuse("cannot read it");
  if (!bytes.empty() && bytes.back() == '\n') bytes.pop_back();
  if (bytes.size() < kMinSecretBytes) {
    return refuse("holds " + std::to_string(bytes.size()) + " bytes; a secret needs at least " +
                  std::to_string(kMinSecretBytes) +
                  " (for example: head -c 32 /dev/urandom | base64 > FILE)");
  }
  secret = GroupSecret(std::move(bytes));
  return {};
}

Status GroupSecret::create_file(const std::string& path) {
  const std::string random = make_nonce() + make_nonce();
  std::string text;
  for (const char byte : random) {
    static constexpr char kDigits[] = "0123456789abcdef";
    text += kDigits[(static_cast<unsigned char>(byte) >> 4) & 0xf];
    text += kDigits[static_cast<unsigned char>(byte) & 0xf];
  }
  text += '\n';
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0 || ::write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
    if (fd >= 0) ::close(fd);
    return Status(ErrorCode::internal, "cannot write a new secret to " + path);
  }
  ::close(fd);
  return {};
}

std::string GroupSecret::prove(std::string_view purpose,
                               std::initializer_list<std::string_view> fields) const {
  std::string message = proof_field(purpose.size()) + std::string(purpose);
  for (std::string_view field : fields) {
    message += proof_field(field.size());
    message += field;
  }
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  if (HMAC(EVP_sha256(), bytes_.data(), static_cast<int>(bytes_.size()),
           reinterpret_cast<const unsigned char*>(message.data()), message.size(), digest,
           &length) == nullptr) {
    std::abort();  // only an allocation failure inside OpenSSL gets here
  }
  return std::string(reinterpret_cast<const char*>(digest), length);
}

bool same_proof(std::string_view a, std::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::string make_nonce() {
  std::string nonce(kNonceBytes, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(nonce.data()), static_cast<int>(nonce.size())) !=
      1) {
    std::abort();  // no randomness: nothing this process proves could be trusted
  }
  return nonce;
}

std::string proof_field(std::uint64_t value) {
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((value >> (8 * i)) & 0xff);
  return bytes;
}

}  // namespace gradsync::net
