// The ring backend with CUDA tensors (staged through pinned host memory), ranks as threads
// sharing GPU 0 (the ring has no one-rank-per-device rule). Sizes span several 4 MiB staging
// chunks and do not divide by them; a rank passing a CPU tensor while the others pass CUDA
// tensors fails with a fingerprint mismatch instead of mixing chunkings.
#include <doctest/doctest.h>

#include "tests/comm/gpu_fixtures.h"

namespace ringgrad::comm::testing {

namespace {

// 2.25 staging chunks of floats plus an odd tail (more chunks for i64, fewer for bf16).
constexpr int64_t kCount = (9 << 20) / 4 + 7;

}  // namespace

TEST_CASE("ring with CUDA tensors: collectives across staging chunks equal the reference") {
  if (skip_without_cuda()) return;
  const Device gpu = Device::cuda(0);
  for (int world : {1, 2, 3}) {
    CAPTURE(world);
    auto store = std::make_shared<HashStore>();
    std::vector<std::vector<std::string>> errors(static_cast<size_t>(world));
    spawn(world, [&](int rank) {
      auto pg = make_ring_group(store, rank, world, "cuda", Milliseconds(60000));
      auto& errs = errors[rank];
      auto expect = [&](const Tensor& got, const Tensor& want, const std::string& what) {
        const std::string m = first_mismatch(got, want);
        if (!m.empty()) errs.push_back(str_cat(what, ": ", m));
      };
      for (DType dtype : {DType::f32, DType::bf16, DType::i64})
        for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg})
          for (int64_t count : {int64_t{0}, int64_t{7}, kCount}) {
            const std::string what =
                str_cat(dtype_name(dtype), " ", reduce_op_name(op), " count ", count);
            auto mine = [&](int64_t i) { return input_value(op, dtype, rank, i); };
            const Tensor reduced = host_values(
                count, dtype, [&](int64_t i) { return expected_value(op, dtype, world, i); });
            AllreduceOptions ao;
            ao.op = op;
            Tensor in = host_values(count, dtype, mine).to(gpu);
            Tensor out = Tensor::zeros({count}, dtype, gpu);
            pg->allreduce(in, out, ao)->wait();
            expect(out, reduced, "allreduce out of place " + what);
            pg->allreduce(in, ao)->wait();
            expect(in, reduced, "allreduce in place " + what);

            const int root = world - 1;
            ReduceOptions ro;
            ro.op = op;
            ro.root = root;
            in = host_values(count, dtype, mine).to(gpu);
            pg->reduce(in, out, ro)->wait();
            if (rank == root) expect(out, reduced, "reduce " + what);
            BroadcastOptions bo;
            bo.root = root;
            pg->broadcast(in, bo)->wait();
            expect(in,
                   host_values(count, dtype,
                               [&](int64_t i) { return input_value(op, dtype, root, i); }),
                   "broadcast " + what);

            Tensor gathered = Tensor::zeros({count * world}, dtype, gpu);
            pg->allgather(host_values(count, dtype, mine).to(gpu), gathered)->wait();
            expect(gathered,
                   host_values(count * world, dtype,
                               [&](int64_t i) {
                                 return input_value(
                                     op, dtype, static_cast<int>(i / std::max<int64_t>(count, 1)),
                                     i % std::max<int64_t>(count, 1));
                               }),
                   "allgather " + what);

            ReduceScatterOptions so;
            so.op = op;
            Tensor full = host_values(count * world, dtype, mine).to(gpu);
            Tensor block = Tensor::zeros({count}, dtype, gpu);
            pg->reduce_scatter(full, block, so)->wait();
            expect(block,
                   host_values(count, dtype,
                               [&](int64_t i) {
                                 return expected_value(op, dtype, world, rank * count + i);
                               }),
                   "reduce_scatter " + what);
          }
      if (world == 2) {
        Tensor data = host_values(kCount, DType::f32, [](int64_t i) {
          return static_cast<double>(index_hash(i) % 1000);
        });
        if (rank == 0) {
          pg->send(data.to(gpu), 1)->wait();
        } else {
          Tensor got = Tensor::zeros({kCount}, DType::f32, gpu);
          pg->recv(got, 0)->wait();
          expect(got, data, "send/recv");
        }
      }
    });
    for (const auto& per_rank : errors)
      for (const auto& e : per_rank) FAIL_CHECK(e);
  }
}

TEST_CASE(
    "ring with CUDA tensors: a CPU tensor on one rank is a fingerprint mismatch on every rank") {
  if (skip_without_cuda()) return;
  auto store = std::make_shared<HashStore>();
  std::vector<std::string> messages(2);
  spawn(2, [&](int rank) {
    auto pg = make_ring_group(store, rank, 2, "mixed", Milliseconds(20000));
    Tensor t =
        rank == 0 ? Tensor::zeros({1000}, DType::f32, Device::cuda(0)) : Tensor::zeros({1000});
    try {
      pg->allreduce(t)->wait();
    } catch (const std::exception& e) {
      messages[rank] = e.what();
    }
  });
  for (const auto& m : messages) {
    CAPTURE(m);
    CHECK(m.find("CUDA buffers") != std::string::npos);
  }
}

TEST_CASE("ring with CUDA tensors: the DDP reducer keeps buckets on the device and averages them") {
  if (skip_without_cuda()) return;
  auto store = std::make_shared<HashStore>();
  std::vector<std::vector<std::string>> errors(2);
  spawn(2, [&](int rank) {
    auto pg = make_ring_group(store, rank, 2, "reducer", Milliseconds(20000));
    check_reducer_averages(*pg, rank, errors[rank]);
  });
  for (const auto& per_rank : errors)
    for (const auto& e : per_rank) FAIL_CHECK(e);
}

}  // namespace ringgrad::comm::testing
