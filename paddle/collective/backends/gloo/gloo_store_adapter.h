// GlooStoreAdapter: our Store seen through Gloo's rendezvous::Store interface.
//
// Gloo's full-mesh connect publishes each rank's pair addresses through a gloo::rendezvous::Store;
// this adapter lets it use the job's own Store (HashStore, TcpStore, ...) under a key prefix, so
// the Gloo backend needs no second rendezvous. Two differences from Gloo's own stores matter:
//  - Every call is bounded. Gloo's base Store::wait(keys, timeout) drops the timeout (a known Gloo
//    bug), and its get() has none; here wait() without a timeout, and get(), use the adapter's
//    timeout, and wait(keys, timeout) honours the one it is given.
//  - Gloo's interface reports failure by throwing, so a failed store call throws GlooStoreError,
//    which carries our Status (missing keys, time waited, the knob to turn) unchanged. Nothing
//    else in the project throws: the backend's CallGloo (gloo_error.h) catches it and returns the
//    Status.
#ifndef PADDLE_COLLECTIVE_BACKENDS_GLOO_GLOO_STORE_ADAPTER_H_
#define PADDLE_COLLECTIVE_BACKENDS_GLOO_GLOO_STORE_ADAPTER_H_

#include <gloo/rendezvous/store.h>

#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "paddle/collective/store/store.h"

namespace paddle {

// What the adapter throws into Gloo when a store call fails; Gloo lets it pass through.
class GlooStoreError : public std::runtime_error {
 public:
  explicit GlooStoreError(absl::Status status)
      : std::runtime_error(status.ToString()), status_(std::move(status)) {}
  const absl::Status& status() const { return status_; }

 private:
  absl::Status status_;
};

class GlooStoreAdapter : public gloo::rendezvous::Store {
 public:
  // Keys go to "<prefix>/<key>" in `store`; get() and wait() without a timeout wait `timeout`.
  GlooStoreAdapter(std::shared_ptr<paddle::Store> store, std::string prefix,
                   absl::Duration timeout);

  void set(const std::string& key, const std::vector<char>& data) override;
  // Waits for `key` up to the adapter's timeout (Gloo's stores block here too).
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

 private:
  std::string Key(const std::string& key) const;
  void WaitFor(const std::vector<std::string>& keys, absl::Duration timeout);

  std::shared_ptr<paddle::Store> store_;
  std::string prefix_;
  absl::Duration timeout_;
};

}  // namespace paddle

#endif  // PADDLE_COLLECTIVE_BACKENDS_GLOO_GLOO_STORE_ADAPTER_H_
