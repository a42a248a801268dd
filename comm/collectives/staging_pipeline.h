// The staging pipeline of the ring backend for device buffers: the ring algorithms work on
// host memory, so a CUDA tensor travels chunk by chunk through two pinned host slots. While
// chunk k is on the wire, chunk k+1 is already being copied device->host into the other slot
// and chunk k-1 host->device out of it. The copies are behind StagingCopier, so a CPU test
// drives the same schedule with host memory standing in for the device.
#pragma once
#include <cstddef>
#include <functional>

namespace ringgrad::comm::collectives {

// `rows` rows of `width` bytes: row i starts at device_offset + i * device_pitch in the
// device buffer and at host_offset + i * host_pitch in the slot. rows == 0: nothing to copy.
struct StagedBlock {
  size_t device_offset = 0, device_pitch = 0;
  size_t host_offset = 0, host_pitch = 0;
  size_t width = 0, rows = 0;
};

// What one chunk moves: `in` from the device input into its slot before its transfer, `out`
// from the slot into the device output after it.
struct StagedChunk {
  StagedBlock in, out;
};

// Asynchronous device<->host copies into two slots. Contract (single thread):
//  - to_host(slot) starts after the slot's previous to_device finished reading it, even when
//    the block is empty, and wait_to_host(slot) returns once both are done: the slot is then
//    the host's to read and write;
//  - to_device(slot) starts after everything the host wrote into the slot so far;
//  - wait_to_device() returns when every to_device issued so far has landed.
class StagingCopier {
 public:
  static constexpr int kSlots = 2;
  virtual ~StagingCopier() = default;
  // Grows both slots to at least `bytes`; called only with no copy in flight.
  virtual void reserve(size_t bytes) = 0;
  virtual unsigned char* slot(int index) = 0;
  virtual void to_host(int slot, const void* device, const StagedBlock& block) = 0;
  virtual void to_device(int slot, void* device, const StagedBlock& block) = 0;
  virtual void wait_to_host(int slot) = 0;
  virtual void wait_to_device() = 0;
};

// Runs `chunks` chunks (chunk k in slot k % 2): plan(k) says what to copy, transfer(k, slot)
// runs the host collective on the slot. Issue order, for every k:
//   to_host(k+1), wait_to_host(k), transfer(k), to_device(k)
// after to_host(0) up front and before wait_to_device() at the end, so the copy in of k+1
// and the copy out of k-1 overlap transfer(k). `slot_bytes` is the most any chunk uses.
void run_staging_pipeline(StagingCopier& copier, const void* device_input, void* device_output,
                          size_t chunks, size_t slot_bytes,
                          const std::function<StagedChunk(size_t chunk)>& plan,
                          const std::function<void(size_t chunk, unsigned char* slot)>& transfer);

}  // namespace ringgrad::comm::collectives
