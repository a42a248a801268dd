// train_throughput: training images/s of one model on a synthetic batch (forward, loss,
// backward, SGD step), after warm-up steps, plus the process's peak resident memory, on the
// CPU or one GPU (--device cuda), optionally under autocast (--amp bf16).
// Prints one line "model batch threads img/s peak_rss_mb" per model; compare_torch.sh (CPU)
// and tests/gpu/run.sh (GPU) run the same models in PyTorch beside it and print the ratios.
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>

#include "apps/cli_checks.h"
#include "core/cuda_memory.h"
#include "nn/amp/autocast.h"
#include "nn/autograd/ops.h"
#include "nn/data/mnist.h"
#include "nn/models/resnet.h"
#include "nn/optim/sgd.h"

using namespace ringgrad;
using namespace ringgrad::nn;

int main(int argc, char** argv) {
  std::string model_name = "resnet20";
  DeviceType device_type = DeviceType::cpu;
  std::optional<DType> amp_dtype;
  int batch = 64, threads = 2, warmup = 3, steps = 20;
  CLI::App app{"train_throughput: training img/s on synthetic MNIST-shaped data"};
  // The compare_*.sh scripts pass their defaults first and the user's flags after: last wins.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.option_defaults()->always_capture_default();
  app.add_option("--model", model_name)->check(CLI::IsMember(model_names()));
  app.add_option("--batch-size", batch)->check(CLI::PositiveNumber);
  app.add_option("--threads", threads)->check(CLI::PositiveNumber);
  app.add_option("--warmup", warmup)->check(CLI::NonNegativeNumber);
  app.add_option("--steps", steps)->check(CLI::PositiveNumber);
  cli::add_choice(app, "--device", device_type, kDeviceTypes, "where to train (cuda: device 0)");
  // fp16 is refused: without a GradScaler its gradients underflow, so it would time a recipe
  // nobody trains with.
  cli::add_choice(app, "--amp", amp_dtype, amp::kAmpModes, "autocast dtype")
      ->check(cli::refuse("fp16", "it needs loss scaling, which this benchmark leaves out"));
  CLI11_PARSE(app, argc, argv);
  try {
    kernels::set_num_threads(threads);
    if (device_type == DeviceType::cuda && !cuda_unavailable_reason().empty())
      RG_THROW(Error, "--device cuda: no usable CUDA device (", cuda_unavailable_reason(), ")");
    const Device device = device_type == DeviceType::cuda ? Device::cuda(0) : Device::cpu();
    Generator rng(0);
    auto model = make_model(model_name, rng);
    model->to(device);
    kernels::SgdParams opts;
    opts.lr = 0.01;
    opts.momentum = 0.9;
    opts.weight_decay = 5e-4;
    Sgd sgd(model->parameters(), opts);
    Dataset data = synthetic_mnist(batch, 1);
    const Tensor images = data.images.to(device), labels = data.labels.to(device);
    // Returns the loss without reading it: on a GPU the steps queue up on the compute stream.
    auto step = [&] {
      sgd.zero_grad();
      Variable loss;
      {
        amp::AutocastGuard autocast(amp_dtype);
        loss = cross_entropy(model->forward(Variable(images)), labels);
      }
      backward(loss);
      sgd.step();
      return loss;
    };
    for (int i = 0; i < warmup; ++i) step().value().item();
    auto start = std::chrono::steady_clock::now();
    Variable last;
    for (int i = 0; i < steps; ++i) last = step();
    last.value().item();  // waits for every queued step
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    std::printf("%s batch %d threads %d img/s %.1f peak_rss_mb %.1f\n", model_name.c_str(), batch,
                threads, static_cast<double>(batch) * steps / seconds, usage.ru_maxrss / 1024.0);
    if (device.is_cpu())
      std::fprintf(stderr, "train_throughput: CPU convolutions on %s\n",
                   kernels::cpu_conv_path(amp_dtype.value_or(DType::f32)).c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_throughput: error: %s\n", user_message(e).c_str());
    return 1;
  }
  return 0;
}
