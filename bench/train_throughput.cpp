// train_throughput: training images/s of one model on a synthetic batch (forward, loss,
// backward, SGD step), after warm-up steps, plus the process's peak resident memory.
// Prints one line "model batch threads img/s peak_rss_mb" per model; compare_torch.sh runs
// the same models in PyTorch beside it and prints the ratios.
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>

#include "nn/autograd/ops.h"
#include "nn/data/mnist.h"
#include "nn/models/resnet.h"
#include "nn/optim/sgd.h"

using namespace ringgrad;
using namespace ringgrad::nn;

int main(int argc, char** argv) {
  std::string model_name = "resnet20";
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
  CLI11_PARSE(app, argc, argv);
  try {
    kernels::set_num_threads(threads);
    Generator rng(0);
    auto model = make_model(model_name, rng);
    kernels::SgdParams opts;
    opts.lr = 0.01;
    opts.momentum = 0.9;
    opts.weight_decay = 5e-4;
    Sgd sgd(model->parameters(), opts);
    Dataset data = synthetic_mnist(batch, 1);
    auto step = [&] {
      sgd.zero_grad();
      Variable loss = cross_entropy(model->forward(Variable(data.images)), data.labels);
      backward(loss);
      sgd.step();
    };
    for (int i = 0; i < warmup; ++i) step();
    auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < steps; ++i) step();
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    std::printf("%s batch %d threads %d img/s %.1f peak_rss_mb %.1f\n", model_name.c_str(), batch,
                threads, static_cast<double>(batch) * steps / seconds, usage.ru_maxrss / 1024.0);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_throughput: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
