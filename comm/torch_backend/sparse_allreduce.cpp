// SparseAllreduce: the header all-gather and sends on the caller's thread, the receives and the
// sum on the thread of its own (see the header for the algorithm).
#include "comm/torch_backend/sparse_allreduce.h"

#include "comm/torch_backend/torch_tensors.h"
#include "core/error.h"

namespace ringgrad::torch_backend {

namespace {

constexpr const char* kOperation = "all_reduce of a sparse tensor";
// Header fields before the sizes: (nnz, sparse_dim, dense_dim, dtype).
constexpr int64_t kNnz = 0, kSparseDim = 1, kDenseDim = 2, kDtype = 3, kSizes = 4;

// Tags of our own, below any a user picks (PyTorch's are >= 0): one per all-reduce, so two in
// flight never take each other's messages, whichever is received first.
int sparse_tag(int64_t number) { return -1 - static_cast<int>(number % (int64_t{1} << 30)); }

// What every rank must agree on, for an error naming the first difference.
std::string describe(const at::Tensor& header) {
  auto h = header.accessor<int64_t, 1>();
  std::string sizes;
  for (int64_t i = kSizes; i < header.numel(); ++i) sizes += str_cat(i > kSizes ? ", " : "", h[i]);
  return str_cat("size (", sizes, "), ", h[kSparseDim], " sparse and ", h[kDenseDim],
                 " dense dims, ", c10::toString(static_cast<at::ScalarType>(h[kDtype])));
}

// `e` with the operation before its sentence, still saying where it was thrown (for logs; the
// backend shows PyTorch's users the sentence alone).
template <class E>
E naming_operation(const std::exception& e) {
  const auto* error = dynamic_cast<const Error*>(&e);
  const std::string message = str_cat(kOperation, ": ", user_message(e));
  return error && !error->where().empty() ? E(error->where(), message) : E(message);
}

}  // namespace

struct SparseAllreduce::Job {
  at::Tensor tensor;       // the caller's; receives the sum
  at::Tensor indices;      // this rank's, coalesced: (sparse_dim, nnz) int64
  at::Tensor values;       // (nnz, dense sizes...)
  at::Tensor headers;      // (size, header length) int64, once `gathered` is done
  comm::WorkPtr gathered;  // the headers' all-gather
  std::vector<comm::WorkPtr> sent;
  int tag = 0;
  comm::Milliseconds timeout{0};
  std::shared_ptr<comm::Work> done = std::make_shared<comm::Work>(kOperation);
};

SparseAllreduce::~SparseAllreduce() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

comm::WorkPtr SparseAllreduce::start(const at::Tensor& tensor, comm::Milliseconds timeout) {
  auto job = std::make_shared<Job>();
  job->tensor = tensor;
  const at::Tensor local = tensor.coalesce();
  job->indices = local._indices().contiguous();
  job->values = local._values().contiguous();
  job->tag = sparse_tag(started_++);
  job->timeout = timeout;

  std::vector<int64_t> fields = {local._nnz(), local.sparse_dim(), local.dense_dim(),
                                 static_cast<int64_t>(local.scalar_type())};
  for (int64_t s : local.sizes()) fields.push_back(s);
  const auto length = static_cast<int64_t>(fields.size());
  at::Tensor header = at::tensor(fields, at::kLong);
  job->headers = at::empty({group_.size(), length}, at::kLong);
  comm::AllgatherOptions gather_options;
  gather_options.timeout = timeout;
  job->gathered = group_.allgather(borrow(header, kOperation, false),
                                   borrow(job->headers, kOperation, false), gather_options);

  comm::SendRecvOptions p2p{job->tag, timeout};
  if (local._nnz() > 0) {
    for (int peer = 0; peer < group_.size(); ++peer) {
      if (peer == group_.rank()) continue;
      job->sent.push_back(group_.send(borrow(job->indices, kOperation, false), peer, p2p));
      job->sent.push_back(group_.send(borrow(job->values, kOperation, false), peer, p2p));
    }
  }

  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
    queue_.push_back(job);
  }
  wake_.notify_one();
  return job->done;
}

void SparseAllreduce::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, nothing left
    auto job = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    std::exception_ptr error;
    try {
      finish(*job);
    } catch (const TimeoutError& e) {  // keeps its type: PyTorch's words for a timeout
      error = std::make_exception_ptr(naming_operation<TimeoutError>(e));
    } catch (const std::exception& e) {
      error = std::make_exception_ptr(naming_operation<Error>(e));
    }
    auto done = job->done;
    job.reset();  // drops our tensor references before anyone sees the Work complete
    done->complete(error);
    lock.lock();
  }
}

void SparseAllreduce::finish(Job& job) {
  job.gathered->await_completion();
  const int size = group_.size(), rank = group_.rank();
  const at::Tensor mine = job.headers[rank];
  for (int r = 0; r < size; ++r) {
    const at::Tensor theirs = job.headers[r];
    if (!at::equal(theirs.narrow(0, 1, theirs.numel() - 1), mine.narrow(0, 1, mine.numel() - 1)))
      throw InvalidArgument(str_cat("rank ", r, " has a tensor of ", describe(theirs), ", rank ",
                                    rank, " one of ", describe(mine)));
  }

  // indices: (sparse_dim, nnz of rank r) per rank r; values: (nnz of rank r, dense sizes...).
  const int64_t sparse_dim = job.indices.size(0);
  std::vector<int64_t> row_shape = job.values.sizes().vec();
  std::vector<at::Tensor> indices(size), values(size);
  std::vector<comm::WorkPtr> received;
  comm::SendRecvOptions p2p{job.tag, job.timeout};
  for (int r = 0; r < size; ++r) {
    if (r == rank) {
      indices[r] = job.indices;
      values[r] = job.values;
      continue;
    }
    row_shape[0] = job.headers[r][kNnz].item<int64_t>();
    indices[r] = at::empty({sparse_dim, row_shape[0]}, job.indices.options());
    values[r] = at::empty(row_shape, job.values.options());
    if (row_shape[0] == 0) continue;  // an empty tensor sends nothing
    received.push_back(group_.recv(borrow(indices[r], kOperation, false), r, p2p));
    received.push_back(group_.recv(borrow(values[r], kOperation, false), r, p2p));
  }
  for (auto& work : received) work->await_completion();
  for (auto& work : job.sent) work->await_completion();

  // Rank order on every rank, so coalesce() adds equal indices' values in the same order and
  // every rank gets the same bits.
  const at::Tensor sum =
      at::sparse_coo_tensor(at::cat(indices, 1), at::cat(values, 0), job.tensor.sizes()).coalesce();
  job.tensor.copy_(sum);
}

}  // namespace ringgrad::torch_backend
