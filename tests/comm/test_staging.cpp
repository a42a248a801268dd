// The ring backend's staging pipeline for device buffers (comm/collectives/staging_pipeline.h,
// staged_collectives.h), driven on the CPU: host memory stands in for the device, and the
// fake copier defers every copy to the latest moment the StagingCopier contract allows, so a
// pipeline that touched a slot too early would read or lose data.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <map>

#include "comm/collectives/staged_collectives.h"
#include "comm/transport/mesh_transport.h"
#include "tests/comm/ring_fixtures.h"

namespace ringgrad::comm::testing {

namespace {

using collectives::StagedBlock;
using collectives::StagedChunk;

void copy_block(unsigned char* device, unsigned char* slot, const StagedBlock& b, bool to_host) {
  // A count-0 collective stages one empty block with empty buffers (null data()), and memcpy
  // of 0 bytes from or to a null pointer is still undefined (UBSan stops the test on it).
  if (b.width == 0) return;
  for (size_t row = 0; row < b.rows; ++row) {
    unsigned char* d = device + b.device_offset + row * b.device_pitch;
    unsigned char* h = slot + b.host_offset + row * b.host_pitch;
    if (to_host)
      std::memcpy(h, d, b.width);
    else
      std::memcpy(d, h, b.width);
  }
}

// Copies run at the last moment the contract allows: a copy in at wait_to_host, a copy out
// when the slot is next claimed by to_host, or at wait_to_device. Logs every call.
class DeferringCopier : public collectives::StagingCopier {
 public:
  std::vector<std::string>* log = nullptr;

  void reserve(size_t bytes) override {
    for (auto& s : slots_) s.resize(std::max(s.size(), bytes), 0xEE);
  }
  unsigned char* slot(int index) override { return slots_[index].data(); }
  void to_host(int slot, const void* device, const StagedBlock& b) override {
    note("to_host", slot);
    flush_out(slot);
    in_[slot] = {const_cast<unsigned char*>(static_cast<const unsigned char*>(device)), b};
  }
  void to_device(int slot, void* device, const StagedBlock& b) override {
    note("to_device", slot);
    out_[slot] = {static_cast<unsigned char*>(device), b};
  }
  void wait_to_host(int slot) override {
    note("wait_to_host", slot);
    if (in_[slot].block.rows)
      copy_block(in_[slot].device, slots_[slot].data(), in_[slot].block, true);
    in_[slot] = {};
  }
  void wait_to_device() override {
    note("wait_to_device", -1);
    for (int s = 0; s < kSlots; ++s) flush_out(s);
  }

 private:
  struct Pending {
    unsigned char* device = nullptr;
    StagedBlock block;
  };
  void note(const char* what, int slot) {
    if (log) log->push_back(slot < 0 ? std::string(what) : str_cat(what, " ", slot));
  }
  void flush_out(int slot) {
    if (out_[slot].block.rows)
      copy_block(out_[slot].device, slots_[slot].data(), out_[slot].block, false);
    out_[slot] = {};
  }
  std::vector<unsigned char> slots_[kSlots];
  Pending in_[kSlots], out_[kSlots];
};

bool same_block(const StagedBlock& a, const StagedBlock& b) {
  return a.device_offset == b.device_offset && a.device_pitch == b.device_pitch &&
         a.host_offset == b.host_offset && a.host_pitch == b.host_pitch && a.width == b.width &&
         a.rows == b.rows;
}

}  // namespace

TEST_CASE("staging: chunk schedule for sizes that do and do not divide by the chunk") {
  CHECK(collectives::chunk_elems_for(24, 4) == 6);
  CHECK(collectives::chunk_elems_for(2, 8) ==
        1);                                   // a chunk smaller than an element still moves one
  CHECK(collectives::chunks_for(0, 6) == 1);  // count 0 still meets its peers once
  CHECK(collectives::chunks_for(12, 6) == 2);
  CHECK(collectives::chunks_for(13, 6) == 3);
  CHECK(collectives::chunk_range(13, 6, 2).begin == 12);
  CHECK(collectives::chunk_range(13, 6, 2).size == 1);

  // 10 floats, 3 per chunk: 3, 3, 3, 1.
  const size_t sizes[] = {3, 3, 3, 1};
  for (size_t k = 0; k < 4; ++k) {
    const StagedChunk c = collectives::elementwise_chunk(10, 4, 3, k, true, false);
    CHECK(same_block(c.in, StagedBlock{k * 12, 0, 0, 0, sizes[k] * 4, 1}));
    CHECK(c.out.rows == 0);
  }
  // allgather, 10 bytes per rank, 4-byte chunks, rank 1 of 3: chunk 2 is bytes 8-9 of every block.
  const StagedChunk g = collectives::allgather_chunk(10, 3, 1, 4, 2);
  CHECK(same_block(g.in, StagedBlock{8, 0, 2, 0, 2, 1}));
  CHECK(same_block(g.out, StagedBlock{8, 10, 0, 2, 2, 3}));
  // reduce_scatter, 5 floats per rank, 2 per chunk, rank 2 of 3: chunk 2 is element 4 of each
  // block.
  const StagedChunk r = collectives::reduce_scatter_chunk(5, 4, 3, 2, 2, 2);
  CHECK(same_block(r.in, StagedBlock{16, 20, 0, 4, 4, 3}));
  CHECK(same_block(r.out, StagedBlock{16, 0, 8, 0, 4, 1}));
}

TEST_CASE("staging: the copy in of chunk k+1 and the copy out of k-1 overlap the transfer of k") {
  std::vector<std::string> log;
  DeferringCopier copier;
  copier.log = &log;
  std::vector<unsigned char> device_in(10), device_out(10, 0);
  for (size_t i = 0; i < device_in.size(); ++i) device_in[i] = static_cast<unsigned char>(i + 1);
  // Transfer doubles each byte, so every chunk must have arrived before and leave after it.
  collectives::run_staging_pipeline(
      copier, device_in.data(), device_out.data(), 3, 4,
      [&](size_t k) { return collectives::elementwise_chunk(10, 1, 4, k, true, true); },
      [&](size_t k, unsigned char* slot) {
        log.push_back(str_cat("transfer ", k));
        for (size_t i = 0; i < collectives::chunk_range(10, 4, k).size; ++i) slot[i] *= 2;
      });
  const std::vector<std::string> want = {
      "to_host 0",  "to_host 1",      "wait_to_host 0", "transfer 0",  "to_device 0",
      "to_host 0",  "wait_to_host 1", "transfer 1",     "to_device 1", "wait_to_host 0",
      "transfer 2", "to_device 0",    "wait_to_device"};
  CHECK(log == want);
  for (size_t i = 0; i < device_out.size(); ++i) CHECK(device_out[i] == 2 * (i + 1));
}

namespace {

std::unique_ptr<MeshTransport> make_transport(std::shared_ptr<Store> store, int rank, int world) {
  MeshTransportOptions o;
  o.setup_timeout = Milliseconds(20000);
  return std::make_unique<MeshTransport>(std::move(store), "staging/", rank, world, o);
}

// Buffer bytes of `count` values v(i) in `dtype`.
std::vector<unsigned char> values(DType dtype, int64_t count,
                                  const std::function<double(int64_t)>& v) {
  Tensor t = Tensor::empty({count}, dtype);
  for (int64_t i = 0; i < count; ++i) t.set_element(i, v(i));
  const auto* p = static_cast<const unsigned char*>(t.raw_data());
  return std::vector<unsigned char>(p, p + t.nbytes());
}

void expect_bytes(const std::vector<unsigned char>& got, const std::vector<unsigned char>& want,
                  size_t offset, const std::string& what, std::vector<std::string>& errors) {
  // std::equal, not memcmp: empty vectors (count 0) have null data(), undefined for memcmp.
  if (!std::equal(want.begin(), want.end(), got.begin() + static_cast<std::ptrdiff_t>(offset)))
    errors.push_back(str_cat(what, ": differs from the reference"));
}

constexpr size_t kChunkBytes = 24;  // tiny, so every size below spans several chunks

}  // namespace

TEST_CASE("staging: staged collectives equal the reference, sizes not divisible by the chunk") {
  for (int world = 1; world <= 3; ++world) {
    CAPTURE(world);
    auto store = std::make_shared<HashStore>();
    std::vector<std::vector<std::string>> errors(static_cast<size_t>(world));
    spawn(world, [&](int rank) {
      auto transport = make_transport(store, rank, world);
      MeshTransport& t = *transport;
      DeferringCopier copier;
      collectives::Scratch scratch;
      collectives::Staging staging{copier, scratch, kChunkBytes};
      auto& errs = errors[rank];
      int seq = 0;
      auto begin = [&] {
        t.begin(str_cat("staged #", seq++), Clock::now() + std::chrono::seconds(20));
      };
      for (DType dtype : {DType::f32, DType::bf16, DType::i64})
        for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max})
          for (int64_t count : {0, 1, 7, 29, 100})
            for (bool in_place : {true, false}) {
              const std::string what =
                  str_cat(dtype_name(dtype), " ", reduce_op_name(op), " count ", count,
                          in_place ? " in place" : " out of place");
              const size_t elem = dtype_size(dtype), n = static_cast<size_t>(count);
              auto mine = [&](int64_t i) { return input_value(op, dtype, rank, i); };
              auto reduced = [&](int64_t i) { return expected_value(op, dtype, world, i); };

              std::vector<unsigned char> in = values(dtype, count, mine);
              std::vector<unsigned char> out(in.size(), 0);
              unsigned char* dst = in_place ? in.data() : out.data();
              begin();
              collectives::staged_allreduce(t, staging, in.data(), dst, n, dtype, op, "");
              expect_bytes(in_place ? in : out, values(dtype, count, reduced), 0,
                           "allreduce " + what, errs);

              const int root = static_cast<int>(count % world);
              in = values(dtype, count, mine);
              std::fill(out.begin(), out.end(), 0);
              begin();
              collectives::staged_reduce(t, staging, in.data(), in_place ? in.data() : out.data(),
                                         n, dtype, op, root);
              if (rank == root)
                expect_bytes(in_place ? in : out, values(dtype, count, reduced), 0,
                             "reduce " + what, errs);

              in = values(dtype, count, mine);
              std::fill(out.begin(), out.end(), 0);
              begin();
              collectives::staged_broadcast(t, staging, in.data(),
                                            in_place ? in.data() : out.data(), n * elem, root);
              expect_bytes(
                  in_place ? in : out,
                  values(dtype, count, [&](int64_t i) { return input_value(op, dtype, root, i); }),
                  0, "broadcast " + what, errs);

              // allgather: rank r's `count` values land in block r; in place, the input is block
              // `rank`.
              std::vector<unsigned char> all(n * elem * world, 0);
              std::vector<unsigned char> want_all;
              for (int r = 0; r < world; ++r) {
                auto block =
                    values(dtype, count, [&](int64_t i) { return input_value(op, dtype, r, i); });
                want_all.insert(want_all.end(), block.begin(), block.end());
              }
              in = values(dtype, count, mine);
              const void* gather_in = in.data();
              if (in_place) {
                // std::copy, not memcpy: at count 0 the vectors' data() is null.
                std::copy(in.begin(), in.end(), all.begin() + rank * n * elem);
                gather_in = all.data() + rank * n * elem;
              }
              begin();
              collectives::staged_allgather(t, staging, gather_in, all.data(), n * elem);
              expect_bytes(all, want_all, 0, "allgather " + what, errs);

              // reduce_scatter: `count` values per rank; rank r gets block r of the reduction.
              std::vector<unsigned char> full = values(dtype, count * world, mine);
              std::vector<unsigned char> block(n * elem, 0);
              begin();
              collectives::staged_reduce_scatter(
                  t, staging, full.data(), in_place ? full.data() + rank * n * elem : block.data(),
                  n, dtype, op);
              expect_bytes(in_place ? full : block,
                           values(dtype, count,
                                  [&](int64_t i) {
                                    return expected_value(op, dtype, world, rank * count + i);
                                  }),
                           in_place ? rank * n * elem : 0, "reduce_scatter " + what, errs);
            }
    });
    for (const auto& per_rank : errors)
      for (const auto& e : per_rank) FAIL_CHECK(e);
  }
}

}  // namespace ringgrad::comm::testing
