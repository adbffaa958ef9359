// Secrets the coordinator hands out and checks: random tokens and session
// keys, their stored digests, and comparison that takes the same time
// whatever the inputs share (so a network peer cannot find a token byte by
// byte from response times). OpenSSL's libcrypto, which gRPC links anyway.
#ifndef HILNAS_UTIL_SECRETS_H_
#define HILNAS_UTIL_SECRETS_H_

#include <string>

#include "absl/strings/string_view.h"

namespace hilnas {

// `bytes` bytes from the operating system's CSPRNG, as 2*bytes lower-case
// hex digits. Aborts only if the kernel's random source fails.
std::string RandomHex(int bytes);

// SHA-256 of `data` as 64 lower-case hex digits. Session keys are stored
// only as digests, so a copied SQLite file grants no agent's session.
std::string Sha256Hex(absl::string_view data);

// HMAC-SHA256 of `data` under `key`, as 64 lower-case hex digits: the web
// page's login cookies are signed with the user's own token, so they
// outlive a coordinator restart and die with the token (issue 39).
std::string HmacSha256Hex(absl::string_view key, absl::string_view data);

// Whether a == b, in time that depends only on the lengths: both are hashed
// first, then the digests are compared with CRYPTO_memcmp.
bool SecretEquals(absl::string_view a, absl::string_view b);

}  // namespace hilnas

#endif  // HILNAS_UTIL_SECRETS_H_
