// One resnet20 training step (forward, loss, backward, SGD with momentum and weight decay) on
// CUDA against the same step on the CPU from identical parameters and data: loss, every
// gradient, the updated parameters and the BN running statistics within 1e-4 relative; and
// SyncBatchNorm on CUDA tensors (a ring group of one, so the staged ring) equals the CPU's;
// a checkpoint of a CUDA model and its momentum buffers loads back onto the device exactly.
#include "comm/process_group/process_group.h"
#include "comm/store/hash_store.h"
#include "nn/autograd/ops.h"
#include "nn/data/mnist.h"
#include "nn/models/resnet.h"
#include "nn/optim/sgd.h"
#include "nn/train/checkpoint.h"
#include "tests/gpu/gpu_fixtures.h"
#include "tests/nn/temp_dir.h"

using namespace ringgrad;
using namespace ringgrad::nn;
using namespace ringgrad::testing;

// Each kernel matches the CPU to 1e-4 on its own (test_gpu_ops.cpp); through a whole network the
// early layers' gradients cannot: cuBLAS and OpenBLAS sum in different orders, and a ReLU input
// that the order moves across zero switches a path of the gradient. Measured on the CPU alone,
// this model's weights perturbed by one part in 1e6 move conv1's gradient by up to 1.3e-3 (one
// part in 1e7: 4e-7), and the first H200 run differed from the CPU by 3.7e-4 there.
constexpr double kGradientTol = 5e-3;

TEST_CASE("gpu training: one resnet20 step on CUDA equals the CPU step") {
  if (skip_without_cuda()) return;
  Generator cpu_rng(5), gpu_rng(5);  // same seed: identical initial parameters
  auto cpu_model = make_model("resnet20", cpu_rng);
  auto gpu_model = make_model("resnet20", gpu_rng);
  gpu_model->to(Device::cuda(0));
  kernels::SgdParams opts;
  opts.lr = 0.1;
  opts.momentum = 0.9;
  opts.weight_decay = 5e-4;
  Sgd cpu_sgd(cpu_model->parameters(), opts), gpu_sgd(gpu_model->parameters(), opts);
  const Dataset data = synthetic_mnist(32, 17);

  Variable cpu_loss = cross_entropy(cpu_model->forward(Variable(data.images)), data.labels);
  Variable gpu_loss =
      cross_entropy(gpu_model->forward(Variable(on_gpu(data.images))), on_gpu(data.labels));
  check_gpu_close(gpu_loss.value(), cpu_loss.value(), 1e-4, "loss");
  backward(cpu_loss);
  backward(gpu_loss);

  const auto cpu_params = cpu_model->named_parameters();
  const auto gpu_params = gpu_model->named_parameters();
  REQUIRE(cpu_params.size() == gpu_params.size());
  for (size_t i = 0; i < cpu_params.size(); ++i) {
    CAPTURE(cpu_params[i].first);
    Variable c = cpu_params[i].second, g = gpu_params[i].second;
    check_gpu_close(g.grad(), c.grad(), kGradientTol, "gradient");
  }
  cpu_sgd.step();
  gpu_sgd.step();
  const auto cpu_state = cpu_model->state_dict();
  const auto gpu_state = gpu_model->state_dict();
  REQUIRE(cpu_state.size() == gpu_state.size());
  for (size_t i = 0; i < cpu_state.size(); ++i) {
    CAPTURE(cpu_state[i].first);
    if (cpu_state[i].second.dtype() == DType::i64) {  // num_batches_tracked, counted on the device
      CHECK(gpu_state[i].second.item() == cpu_state[i].second.item());
      continue;
    }
    check_gpu_close(gpu_state[i].second, cpu_state[i].second, 1e-4, "parameter or buffer");
  }
}

TEST_CASE("gpu training: sync_batch_norm on CUDA tensors equals the CPU's, forward and backward") {
  if (skip_without_cuda()) return;
  auto group =
      comm::create_process_group(comm::Backend::ring, std::make_shared<comm::HashStore>(), 0, 1);
  Generator g(8);
  const Tensor x = random_f32({4, 3, 5, 5}, g);
  const Tensor gamma = random_f32({3}, g), beta = random_f32({3}, g);
  Tensor rm = Tensor::zeros({3}), rv = Tensor::full({3}, 1.0);
  Tensor rm_gpu = on_gpu(rm), rv_gpu = on_gpu(rv);
  Variable xc(x, true), gc(gamma, true), bc(beta, true);
  Variable xg(on_gpu(x), true), gg(on_gpu(gamma), true), bg(on_gpu(beta), true);
  Variable yc = sync_batch_norm(xc, gc, bc, rm, rv, 0.1, 1e-5, *group);
  Variable yg = sync_batch_norm(xg, gg, bg, rm_gpu, rv_gpu, 0.1, 1e-5, *group);
  check_gpu_close(yg.value(), yc.value(), 1e-4, "y");
  check_gpu_close(rm_gpu, rm, 1e-4, "running_mean");
  check_gpu_close(rv_gpu, rv, 1e-4, "running_var");
  // A scalar loss whose gradient is not constant within a channel (relu, and the labels pick
  // different positions of each image).
  const Tensor labels = Tensor::from_vector<int64_t>({3, 70, 12, 41}, {4});
  backward(cross_entropy(reshape(relu(yc), {4, 75}), labels));
  backward(cross_entropy(reshape(relu(yg), {4, 75}), on_gpu(labels)));
  check_gpu_close(xg.grad(), xc.grad(), 1e-4, "dx");
  check_gpu_close(gg.grad(), gc.grad(), 1e-4, "dgamma");
  check_gpu_close(bg.grad(), bc.grad(), 1e-4, "dbeta");
}

TEST_CASE("gpu training: a checkpoint of CUDA tensors loads back onto the device exactly") {
  if (skip_without_cuda()) return;
  Generator rng(4), other_rng(9);
  auto model = make_model("resnet8", rng), restored = make_model("resnet8", other_rng);
  model->to(Device::cuda(0));
  restored->to(Device::cuda(0));
  kernels::SgdParams opts;
  opts.lr = 0.1;
  opts.momentum = 0.9;
  Sgd sgd(model->parameters(), opts), restored_sgd(restored->parameters(), opts);
  const Dataset data = synthetic_mnist(8, 3);
  backward(cross_entropy(model->forward(Variable(on_gpu(data.images))), on_gpu(data.labels)));
  sgd.step();  // momentum buffers now exist, on the device
  nn::testing::TempDir dir;
  const CheckpointInfo info{"resnet8", 4, 10};
  save_checkpoint(dir.file("ck.safetensors"), *model, sgd, {0, 1, 1}, info);
  load_checkpoint(dir.file("ck.safetensors"), *restored, restored_sgd, info);
  const auto saved = model->state_dict(), loaded = restored->state_dict();
  REQUIRE(saved.size() == loaded.size());
  for (size_t i = 0; i < saved.size(); ++i) {
    CAPTURE(saved[i].first);
    CHECK(loaded[i].second.is_cuda());
    if (saved[i].second.dtype() == DType::i64)
      CHECK(loaded[i].second.item() == saved[i].second.item());
    else
      check_gpu_close(loaded[i].second, saved[i].second.to(Device::cpu()), 0, "state dict entry");
  }
  for (size_t i = 0; i < sgd.momentum_buffers().size(); ++i) {
    const Tensor& m = restored_sgd.momentum_buffers()[i];
    REQUIRE(m.defined());
    CHECK(m.is_cuda());
    check_gpu_close(m, sgd.momentum_buffers()[i].to(Device::cpu()), 0, "momentum buffer");
  }
}
