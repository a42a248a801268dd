// The staging pipeline's schedule (see the header for the issue order and why).
#include "comm/collectives/staging_pipeline.h"

namespace ringgrad::comm::collectives {

void run_staging_pipeline(StagingCopier& copier, const void* device_input, void* device_output,
                          size_t chunks, size_t slot_bytes,
                          const std::function<StagedChunk(size_t chunk)>& plan,
                          const std::function<void(size_t chunk, unsigned char* slot)>& transfer) {
  if (chunks == 0) return;
  copier.reserve(slot_bytes);
  StagedChunk current = plan(0);
  copier.to_host(0, device_input, current.in);
  for (size_t chunk = 0; chunk < chunks; ++chunk) {
    const int slot = static_cast<int>(chunk % StagingCopier::kSlots);
    StagedChunk next;
    if (chunk + 1 < chunks) {
      next = plan(chunk + 1);
      copier.to_host(1 - slot, device_input, next.in);
    }
    copier.wait_to_host(slot);
    transfer(chunk, copier.slot(slot));
    copier.to_device(slot, device_output, current.out);
    current = next;
  }
  copier.wait_to_device();
}

}  // namespace ringgrad::comm::collectives
