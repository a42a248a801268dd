// cross_entropy: fused log-softmax + NLL; backward is (softmax - onehot) / N times the
// incoming scalar gradient.
#include "nn/amp/autocast.h"
#include "nn/autograd/ops.h"

namespace ringgrad::nn {

namespace {

struct CrossEntropyNode : Node {
  Tensor log_probs, labels;
  const char* name() const override { return "cross_entropy"; }
  void backward(const Tensor& dloss, std::vector<Tensor>& grads) override {
    Tensor dlogits = Tensor::empty(log_probs.shape(), log_probs.dtype(), log_probs.device());
    kernels::cross_entropy_backward(dlogits, log_probs, labels, dloss.item());
    grads[0] = dlogits;
  }
};

}  // namespace

Variable cross_entropy(const Variable& logits_in, const Tensor& labels) {
  const Variable logits = amp::cast_for_fp32_op(logits_in);  // autocast: softmax in f32
  const Tensor& lv = logits.value();
  Tensor loss = Tensor::empty({}, lv.dtype(), lv.device());
  Tensor log_probs = Tensor::empty(lv.shape(), lv.dtype(), lv.device());
  kernels::cross_entropy_forward(loss, log_probs, lv, labels);
  if (!any_requires_grad({&logits})) return Variable(loss);
  auto node = std::make_shared<CrossEntropyNode>();
  node->log_probs = log_probs;
  node->labels = labels;
  return make_result(loss, node, {&logits});
}

}  // namespace ringgrad::nn
