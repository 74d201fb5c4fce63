// SpareBuffers: large unexpected-message buffers kept for reuse by one channel (Note [Spare
// unexpected-message buffers] in spare_buffers.cc).
#ifndef PADDLE_COLLECTIVE_TRANSPORT_SPARE_BUFFERS_H_
#define PADDLE_COLLECTIVE_TRANSPORT_SPARE_BUFFERS_H_

#include <cstddef>
#include <memory>
#include <vector>

namespace paddle {

// Not thread-safe: the channel that owns it guards it with its receive lock.
class SpareBuffers {
 public:
  struct Buffer {
    std::unique_ptr<char[]> data;  // null when memory ran out
    size_t capacity = 0;
  };

  // Buffers smaller than this are never kept.
  static constexpr size_t kMinBytes = size_t{64} << 10;
  // At most this many buffers and this many bytes in all are kept (Note [Spare unexpected-message
  // buffers]: a sender that runs ahead has many messages of one size in flight).
  static constexpr size_t kMaxSpares = 64;
  static constexpr size_t kMaxSpareBytes = size_t{128} << 20;

  // A buffer of at least `bytes`: a spare one that fits (no more than twice as large) when there
  // is one, else a new one.
  Buffer Take(size_t bytes);
  // Keeps `buffer` for a later Take() if it is large enough and the limits allow; frees it
  // otherwise.
  void GiveBack(Buffer buffer);

  void clear() { spare_.clear(); }
  // How many buffers are kept now (for tests).
  size_t size() const { return spare_.size(); }

 private:
  std::vector<Buffer> spare_;
};

}  // namespace paddle

#endif  // PADDLE_COLLECTIVE_TRANSPORT_SPARE_BUFFERS_H_
