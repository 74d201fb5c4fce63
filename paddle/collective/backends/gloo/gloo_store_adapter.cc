// GlooStoreAdapter: Gloo's set/get/wait mapped onto our Store, every wait bounded.
#include "paddle/collective/backends/gloo/gloo_store_adapter.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "paddle/core/status.h"

namespace paddle {

GlooStoreAdapter::GlooStoreAdapter(std::shared_ptr<paddle::Store> store, std::string prefix,
                                   absl::Duration timeout)
    : store_(std::move(store)), prefix_(std::move(prefix)), timeout_(timeout) {}

std::string GlooStoreAdapter::Key(const std::string& key) const {
  return absl::StrCat(prefix_, "/", key);
}

void GlooStoreAdapter::set(const std::string& key, const std::vector<char>& data) {
  absl::Status status = store_->Set(Key(key), absl::string_view(data.data(), data.size()));
  if (!status.ok())
    throw GlooStoreError(Annotate(status, "Gloo rendezvous: publishing an address"));
}

std::vector<char> GlooStoreAdapter::get(const std::string& key) {
  absl::StatusOr<std::string> value = store_->Get(Key(key), timeout_);
  if (!value.ok()) {
    throw GlooStoreError(Annotate(value.status(), "Gloo rendezvous: reading a peer's address"));
  }
  return std::vector<char>(value->begin(), value->end());
}

void GlooStoreAdapter::wait(const std::vector<std::string>& keys) { WaitFor(keys, timeout_); }

void GlooStoreAdapter::wait(const std::vector<std::string>& keys,
                            const std::chrono::milliseconds& timeout) {
  // Gloo passes its context timeout; a zero or negative one would expire at once, which is never
  // what it means, so the adapter's own timeout stands in.
  WaitFor(keys, timeout.count() > 0 ? absl::FromChrono(timeout) : timeout_);
}

void GlooStoreAdapter::WaitFor(const std::vector<std::string>& keys, absl::Duration timeout) {
  std::vector<std::string> full;
  full.reserve(keys.size());
  for (const std::string& key : keys) full.push_back(Key(key));
  absl::Status status = store_->Wait(full, timeout);
  if (!status.ok()) {
    throw GlooStoreError(Annotate(status, "Gloo rendezvous: waiting for peers' addresses"));
  }
}

}  // namespace paddle
