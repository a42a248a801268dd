// The nccl backend on one GPU. NCCL allows one rank per device, so with one GPU only world
// size 1 runs collectives; a second rank that never joins (setup timeout) and a stalled
// operation (Work::wait timeout) exercise the abort paths. Multi-rank NCCL runs need as many
// GPUs as ranks (all_reduce_perf --backend nccl under ringgrad-run on such a machine).
#include <cuda_runtime.h>
#include <doctest/doctest.h>

#include <chrono>
#include <thread>

#include "comm/nccl/nccl_process_group.h"
#include "tests/comm/gpu_fixtures.h"

namespace ringgrad::comm::testing {

namespace {

std::unique_ptr<ProcessGroup> make_nccl_group(std::shared_ptr<Store> store, int rank, int world,
                                              const std::string& name, Milliseconds timeout) {
  ProcessGroupOptions o;
  o.group_name = name;
  o.timeout = timeout;
  o.cuda_device = 0;
  return create_process_group(Backend::nccl, std::move(store), rank, world, o);
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

constexpr DType kDTypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16,
                             DType::i32, DType::i64, DType::u8};

}  // namespace

TEST_CASE("nccl: world size 1, every collective, dtype and op on CUDA tensors") {
  if (skip_without_cuda()) return;
  auto pg = make_nccl_group(std::make_shared<HashStore>(), 0, 1, "one", Milliseconds(60000));
  CHECK(pg->backend_name() == "nccl");
  const Device gpu = Device::cuda(0);
  for (DType dtype : kDTypes)
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::prod, ReduceOp::min, ReduceOp::max})
      for (int64_t count : {0, 1, 1001, (1 << 20) + 3}) {
        INFO("dtype: ", dtype_name(dtype));
        INFO("op: ", reduce_op_name(op));
        CAPTURE(count);
        Tensor want =
            host_values(count, dtype, [&](int64_t i) { return input_value(op, dtype, 0, i); });
        Tensor in = want.to(gpu), out = Tensor::zeros({count}, dtype, gpu);
        pg->allreduce(in, out, AllreduceOptions{op})->wait();
        CHECK(first_mismatch(out, want) == "");
        pg->allreduce(in, AllreduceOptions{op})->wait();
        CHECK(first_mismatch(in, want) == "");
        out.zero_();
        pg->reduce(in, out, ReduceOptions{op})->wait();
        CHECK(first_mismatch(out, want) == "");
        out.zero_();
        pg->broadcast(in, out)->wait();
        CHECK(first_mismatch(out, want) == "");
        out.zero_();
        pg->allgather(in, out)->wait();
        CHECK(first_mismatch(out, want) == "");
        pg->allgather_inplace(out)->wait();
        CHECK(first_mismatch(out, want) == "");
        out.zero_();
        pg->reduce_scatter(in, out, ReduceScatterOptions{op})->wait();
        CHECK(first_mismatch(out, want) == "");
        pg->reduce_scatter_inplace(in, ReduceScatterOptions{op})->wait();
        CHECK(first_mismatch(in, want) == "");
      }
  auto w = pg->barrier();
  w->wait(Milliseconds(10000));
  CHECK(w->is_completed());
}

TEST_CASE("nccl: CPU tensors, other devices and bad shapes are refused on the caller's thread") {
  if (skip_without_cuda()) return;
  auto pg = make_nccl_group(std::make_shared<HashStore>(), 0, 1, "args", Milliseconds(60000));
  CHECK_THROWS_WITH_AS(pg->allreduce(Tensor::zeros({3})), doctest::Contains("use the ring backend"),
                       InvalidArgument);
  const Device gpu = Device::cuda(0);
  CHECK_THROWS_WITH_AS(
      pg->allreduce(Tensor::zeros({3}, DType::f32, gpu), Tensor::zeros({4}, DType::f32, gpu)),
      doctest::Contains("expected 3"), InvalidArgument);
  BroadcastOptions bo;
  bo.root = 1;
  CHECK_THROWS_WITH_AS(pg->broadcast(Tensor::zeros({3}, DType::f32, gpu), bo),
                       doctest::Contains("root 1 is outside the group of size 1"), InvalidArgument);
  CHECK_THROWS_WITH(pg->send(Tensor::zeros({3}, DType::f32, gpu), 0),
                    doctest::Contains("cannot send to itself"));
}

TEST_CASE("nccl: a rank that never joins fails setup at the timeout, naming the rank and group") {
  if (skip_without_cuda()) return;
  ProcessGroupOptions o;
  o.group_name = "lonely";
  o.cuda_device = 0;
  o.setup_timeout = Milliseconds(2000);
  const auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH_AS(
      create_process_group(Backend::nccl, std::make_shared<HashStore>(), 0, 2, o),
      doctest::Contains(
          "communicator setup on rank 0 of 2 (group 'lonely', cuda:0) not finished after"),
      TimeoutError);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(30));
  // A rank whose rank 0 never publishes the id waits in the store and names the key.
  o.group_name = "no-root";
  CHECK_THROWS_WITH(create_process_group(Backend::nccl, std::make_shared<HashStore>(), 1, 2, o),
                    doctest::Contains("ncclpg/no-root/g0/unique_id"));
}

TEST_CASE("nccl: a stalled operation times out in wait, aborts, and the group refuses later work") {
  if (skip_without_cuda()) return;
  auto pg = make_nccl_group(std::make_shared<HashStore>(), 0, 1, "stall", Milliseconds(60000));
  const Device gpu = Device::cuda(0);
  Tensor t = Tensor::zeros({1024}, DType::f32, gpu);
  // The group's stream waits for the legacy default stream (Note [nccl stream ordering]), so
  // a host function sleeping there holds the all-reduce back for 1.5 s.
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  REQUIRE(cudaLaunchHostFunc(
              nullptr, [](void*) { std::this_thread::sleep_for(std::chrono::milliseconds(1500)); },
              nullptr) == cudaSuccess);
  auto work = pg->allreduce(t);
  std::string message;
  try {
    work->wait(Milliseconds(200));
  } catch (const TimeoutError& e) {
    message = e.what();
  }
  CHECK(contains(message, "allreduce #0"));
  CHECK(contains(message, "rank 0 of 1 (group 'stall', cuda:0)"));
  CHECK(contains(message, "not finished after 200 ms"));
  CHECK(contains(message, "aborted the communicator"));
  CHECK_THROWS_WITH(pg->allreduce(t), doctest::Contains("was aborted earlier"));
  cudaDeviceSynchronize();
}

TEST_CASE("nccl: the DDP reducer runs unchanged on CUDA parameters, world size 1") {
  if (skip_without_cuda()) return;
  auto pg = make_nccl_group(std::make_shared<HashStore>(), 0, 1, "reducer", Milliseconds(60000));
  std::vector<std::string> errors;
  check_reducer_averages(*pg, 0, errors);
  for (const auto& e : errors) FAIL_CHECK(e);
}

}  // namespace ringgrad::comm::testing
