// StoreBarrier: all `world_size` ranks meet at a named point, through any Store.
//
// Used by rendezvous (every rank has joined) and by anything else that must not run ahead of
// the slowest rank, such as a final "done" barrier before tearing connections down. When it times
// out it says which ranks never arrived, which is the one fact a user needs to find a hung or
// missing process. Each name is for one use: a barrier name reused in the same store counts the
// arrivals of both uses together.
#ifndef PADDLE_COLLECTIVE_RENDEZVOUS_STORE_BARRIER_H_
#define PADDLE_COLLECTIVE_RENDEZVOUS_STORE_BARRIER_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "paddle/collective/store/store.h"

namespace paddle {

// Returns once all ranks 0..world_size-1 have called StoreBarrier(store, name, ...).
// kDeadlineExceeded after `timeout`, naming the ranks that never arrived; kAborted if some rank
// called AbortStoreBarrier on `name`, with its reason.
absl::Status StoreBarrier(Store& store, absl::string_view name, int rank, int world_size,
                          absl::Duration timeout);

// Makes every present and future StoreBarrier on `name` fail at once with `reason` (from `rank`),
// so that ranks waiting for a process that has given up learn why instead of timing out. Has no
// effect on a barrier that has already completed.
absl::Status AbortStoreBarrier(Store& store, absl::string_view name, int rank,
                               absl::string_view reason);

}  // namespace paddle

#endif  // PADDLE_COLLECTIVE_RENDEZVOUS_STORE_BARRIER_H_
