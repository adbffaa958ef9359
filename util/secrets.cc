#include "util/secrets.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

namespace hilnas {
namespace {

std::string Hex(const unsigned char* p, size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = kDigits[p[i] >> 4];
    out[2 * i + 1] = kDigits[p[i] & 15];
  }
  return out;
}

void Digest(absl::string_view data, unsigned char out[SHA256_DIGEST_LENGTH]) {
  SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(), out);
}

}  // namespace

std::string RandomHex(int bytes) {
  std::vector<unsigned char> buf(static_cast<size_t>(bytes));
  if (RAND_bytes(buf.data(), bytes) != 1) {
    // Handing out a predictable secret would be worse than stopping.
    std::fprintf(stderr, "hilnas: the system's random source failed\n");
    std::abort();
  }
  return Hex(buf.data(), buf.size());
}

std::string Sha256Hex(absl::string_view data) {
  unsigned char d[SHA256_DIGEST_LENGTH];
  Digest(data, d);
  return Hex(d, sizeof(d));
}

std::string HmacSha256Hex(absl::string_view key, absl::string_view data) {
  unsigned char d[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  if (HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
           reinterpret_cast<const unsigned char*>(data.data()), data.size(), d, &n) == nullptr) {
    std::abort();  // only on allocation failure inside libcrypto
  }
  return Hex(d, n);
}

bool SecretEquals(absl::string_view a, absl::string_view b) {
  unsigned char da[SHA256_DIGEST_LENGTH], db[SHA256_DIGEST_LENGTH];
  Digest(a, da);
  Digest(b, db);
  return CRYPTO_memcmp(da, db, sizeof(da)) == 0;
}

}  // namespace hilnas
