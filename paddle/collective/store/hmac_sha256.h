// SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104), for the TCPStore's job-token handshake.
//
// The TCPStore proves that a client knows the job token without sending it: the server sends a
// random nonce and the client answers HmacSha256(token, nonce). Only this one primitive is
// needed, so it lives here, small and tested against the FIPS 180-4 and RFC 4231 vectors, rather
// than pulling OpenSSL into every binary that talks to a store.
#ifndef PADDLE_COLLECTIVE_STORE_HMAC_SHA256_H_
#define PADDLE_COLLECTIVE_STORE_HMAC_SHA256_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace paddle {

using Sha256Digest = std::array<uint8_t, 32>;

// Incremental SHA-256: Update() any number of times, then Final() once.
class Sha256 {
 public:
  Sha256();
  void Update(absl::string_view data);
  Sha256Digest Final();

 private:
  void Compress(const uint8_t* block);

  uint32_t state_[8];
  uint8_t block_[64];
  size_t block_len_ = 0;
  uint64_t total_bytes_ = 0;
};

Sha256Digest Sha256Of(absl::string_view data);
Sha256Digest HmacSha256(absl::string_view key, absl::string_view message);

// Lower-case hex of `bytes`, for tests and logs.
std::string HexOf(absl::string_view bytes);
inline absl::string_view DigestBytes(const Sha256Digest& d) {
  return absl::string_view(reinterpret_cast<const char*>(d.data()), d.size());
}

// `bytes` bytes from the kernel's random source (getrandom), for nonces, challenges and secrets.
std::string RandomBytes(size_t bytes);

// Compares without an early exit, so the time taken does not tell an attacker how many leading
// bytes of a guessed proof were right.
bool ConstantTimeEquals(absl::string_view a, absl::string_view b);

}  // namespace paddle

#endif  // PADDLE_COLLECTIVE_STORE_HMAC_SHA256_H_
