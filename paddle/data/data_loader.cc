#include "paddle/data/data_loader.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "paddle/core/status.h"

namespace paddle {
namespace data {
namespace {

// A contiguous CPU copy of `t` (itself if already contiguous), or an error naming `what`.
absl::StatusOr<Tensor> CheckedContiguous(const Tensor& t, const char* what) {
  if (!t.defined() || t.dim() == 0) {
    return absl::InvalidArgumentError(absl::StrCat("DataLoader: dataset ", what, " is ",
                                                   t.ToString(), "; it needs a sample dimension"));
  }
  if (!t.device().is_cpu()) {
    return absl::InvalidArgumentError(absl::StrCat("DataLoader: dataset ", what, " is ",
                                                   t.ToString(), "; it must be on the CPU"));
  }
  return t.Contiguous();
}

// `rows` of `t`'s leading dimension: the shape of a batch of them.
Shape BatchShape(const Tensor& t, int64_t rows) {
  Shape shape = t.shape();
  shape[0] = rows;
  return shape;
}

// A status sharing no reference count with `status`, for handing to another thread (see Note
// [Locks and ThreadSanitizer] in paddle/collective/transport/tcp/tcp_request.h).
absl::Status CopyOf(const absl::Status& status) {
  return status.ok() ? absl::OkStatus() : absl::Status(status.code(), status.message());
}

int64_t RowBytes(const Tensor& t) {
  return t.shape()[0] == 0 ? 0 : static_cast<int64_t>(t.nbytes()) / t.shape()[0];
}

}  // namespace

absl::StatusOr<std::unique_ptr<DataLoader>> DataLoader::Create(Dataset dataset,
                                                               DistributedSampler sampler,
                                                               int64_t batch_size, bool drop_last,
                                                               int prefetch_depth,
                                                               Allocator* allocator) {
  if (batch_size <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("DataLoader: batch_size ", batch_size, " must be positive"));
  }
  if (prefetch_depth <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("DataLoader: prefetch_depth ", prefetch_depth, " must be positive"));
  }
  absl::StatusOr<Tensor> images = CheckedContiguous(dataset.images, "images");
  if (!images.ok()) return images.status();
  absl::StatusOr<Tensor> labels = CheckedContiguous(dataset.labels, "labels");
  if (!labels.ok()) return labels.status();
  if (images->shape()[0] != labels->shape()[0]) {
    return absl::InvalidArgumentError(absl::StrCat("DataLoader: dataset images ",
                                                   images->ToString(), " and labels ",
                                                   labels->ToString(), " differ in sample count"));
  }
  if (images->shape()[0] != sampler.dataset_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("DataLoader: the dataset has ", images->shape()[0],
                     " samples but the sampler was made for ", sampler.dataset_size()));
  }
  dataset.images = *std::move(images);
  dataset.labels = *std::move(labels);
  return std::unique_ptr<DataLoader>(new DataLoader(std::move(dataset), sampler, batch_size,
                                                    drop_last, prefetch_depth, allocator));
}

DataLoader::DataLoader(Dataset dataset, DistributedSampler sampler, int64_t batch_size,
                       bool drop_last, int prefetch_depth, Allocator* allocator)
    : dataset_(std::move(dataset)),
      sampler_(sampler),
      batch_size_(batch_size),
      drop_last_(drop_last),
      prefetch_depth_(prefetch_depth),
      allocator_(allocator),
      image_row_bytes_(RowBytes(dataset_.images)),
      label_row_bytes_(RowBytes(dataset_.labels)) {}

DataLoader::~DataLoader() { StopProducer(); }

void DataLoader::StopProducer() {
  if (!producer_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  producer_.join();
}

void DataLoader::StartEpoch(int64_t epoch) {
  StopProducer();
  // A restored offset applies to the first start of its epoch only (see the header).
  if (sampler_.state().epoch != epoch) sampler_.SetEpoch(epoch);
  const int64_t offset = sampler_.state().offset;
  std::vector<int64_t> indices = sampler_.Indices();
  sampler_.SetEpoch(epoch);

  const int64_t remaining = static_cast<int64_t>(indices.size());
  num_batches_ = drop_last_ ? remaining / batch_size_ : (remaining + batch_size_ - 1) / batch_size_;
  {
    std::lock_guard<std::mutex> lock(mu_);
    started_ = true;
    stop_ = false;
    done_ = false;
    error_ = absl::OkStatus();
    queue_.clear();
    epoch_ = epoch;
    start_offset_ = offset;
    consumed_ = 0;
  }
  producer_ = std::thread(&DataLoader::Produce, this, std::move(indices), num_batches_,
                          offset / batch_size_);
}

void DataLoader::Produce(std::vector<int64_t> indices, int64_t num_batches, int64_t first_index) {
  const int64_t remaining = static_cast<int64_t>(indices.size());
  for (int64_t b = 0; b < num_batches; ++b) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || static_cast<int>(queue_.size()) < prefetch_depth_; });
      if (stop_) return;
    }
    // Only this thread adds to the queue, so the slot found above stays free while we gather.
    const int64_t begin = b * batch_size_;
    const int64_t count = std::min(batch_size_, remaining - begin);
    absl::StatusOr<Batch> batch = Gather(indices.data() + begin, count, first_index + b);
    const bool ok = batch.ok();
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (ok) {
        queue_.push_back(*std::move(batch));
      } else {
        error_ = CopyOf(batch.status());
      }
    }
    cv_.notify_all();
    if (!ok) return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
  }
  cv_.notify_all();
}

absl::StatusOr<Batch> DataLoader::Gather(const int64_t* indices, int64_t count,
                                         int64_t index) const {
  Batch batch;
  batch.index = index;
  auto allocate = [&](const Tensor& source, const char* what) -> absl::StatusOr<Tensor> {
    absl::StatusOr<Tensor> t = Tensor::Empty(BatchShape(source, count), source.dtype(), allocator_);
    if (t.ok()) return t;
    return Annotate(t.status(), absl::StrCat("DataLoader: allocating batch ", index, " (", count,
                                             " samples) ", what));
  };
  absl::StatusOr<Tensor> images = allocate(dataset_.images, "images");
  if (!images.ok()) return images.status();
  absl::StatusOr<Tensor> labels = allocate(dataset_.labels, "labels");
  if (!labels.ok()) return labels.status();
  const char* image_src = static_cast<const char*>(dataset_.images.data());
  const char* label_src = static_cast<const char*>(dataset_.labels.data());
  char* image_dst = static_cast<char*>(images->data());
  char* label_dst = static_cast<char*>(labels->data());
  for (int64_t i = 0; i < count; ++i) {
    // The sampler only yields indices below dataset_size, checked equal to the row count.
    std::memcpy(image_dst + i * image_row_bytes_, image_src + indices[i] * image_row_bytes_,
                image_row_bytes_);
    std::memcpy(label_dst + i * label_row_bytes_, label_src + indices[i] * label_row_bytes_,
                label_row_bytes_);
  }
  batch.images = *std::move(images);
  batch.labels = *std::move(labels);
  return batch;
}

absl::StatusOr<std::optional<Batch>> DataLoader::Next() {
  std::unique_lock<std::mutex> lock(mu_);
  if (!started_) {
    return absl::FailedPreconditionError(
        "DataLoader::Next called before StartEpoch; call StartEpoch(epoch) at each epoch's start");
  }
  cv_.wait(lock, [&] { return !queue_.empty() || done_ || !error_.ok(); });
  if (queue_.empty()) {
    if (!error_.ok()) return CopyOf(error_);
    return std::optional<Batch>();
  }
  Batch batch = std::move(queue_.front());
  queue_.pop_front();
  consumed_ += batch.labels.shape()[0];
  lock.unlock();
  cv_.notify_all();
  return std::optional<Batch>(std::move(batch));
}

DataLoader::State DataLoader::state() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!started_) return sampler_.state();
  return State{epoch_, start_offset_ + consumed_};
}

}  // namespace data
}  // namespace paddle
