// Sharded evaluation.
#include "nn/train/evaluate.h"

#include <algorithm>
#include <cstring>

#include "nn/autograd/ops.h"
#include "nn/data/sampler.h"

namespace ringgrad::nn {

EvalResult evaluate(Module& model, const Dataset& test, int64_t batch_size,
                    comm::ProcessGroup* group) {
  NoGradGuard no_grad;
  model.eval();
  const Device device = model.parameters().front().value().device();
  const int world = group ? group->size() : 1, rank = group ? group->rank() : 0;
  const std::vector<int64_t> indices =
      DistributedSampler::for_evaluation(test.size(), world, rank).indices();
  const Shape& shape = test.images.shape();
  const size_t row_bytes = test.images.nbytes() / std::max<int64_t>(1, shape[0]);
  double loss_sum = 0, correct = 0;
  for (size_t start = 0; start < indices.size(); start += batch_size) {
    const int64_t rows = std::min<int64_t>(batch_size, indices.size() - start);
    Tensor images = Tensor::empty({rows, shape[1], shape[2], shape[3]});
    Tensor labels = Tensor::empty({rows}, DType::i64);
    for (int64_t i = 0; i < rows; ++i) {
      const int64_t src = indices[start + i];
      std::memcpy(static_cast<char*>(images.raw_data()) + i * row_bytes,
                  static_cast<const char*>(test.images.raw_data()) + src * row_bytes, row_bytes);
      labels.data<int64_t>()[i] = test.labels.data<int64_t>()[src];
    }
    const Tensor on_device = labels.to(device);
    Variable logits = model.forward(Variable(images.to(device)));
    loss_sum += cross_entropy(logits, on_device).value().item() * static_cast<double>(rows);
    correct += static_cast<double>(kernels::count_correct(logits.value(), on_device));
  }
  Tensor sums = Tensor::from_vector<double>({loss_sum, correct, double(indices.size())}, {3});
  if (group) {  // on the model's device: the group's backend may take CUDA tensors only (nccl)
    Tensor reduced = sums.to(device);
    group->allreduce(reduced)->wait();
    sums = reduced.to(Device::cpu());
  }
  model.train();
  const double* s = sums.data<double>();
  EvalResult r;
  r.count = static_cast<int64_t>(s[2]);
  if (r.count > 0) {
    r.loss = s[0] / s[2];
    r.accuracy = s[1] / s[2];
  }
  return r;
}

}  // namespace ringgrad::nn
