// The argument checks every backend (ring, nccl) makes before it enqueues anything, so that a
// bad rank is the same InvalidArgument, in the same words, whichever backend runs.
#pragma once

namespace ringgrad::comm {

// `r` names a rank of a group of `size` (a root, a destination, a source).
void check_rank(int r, int size, const char* operation, const char* role);
// The peer of a send (sending) or recv: in the group, and not the calling rank itself.
void check_peer(int peer, int rank, int size, bool sending);

}  // namespace ringgrad::comm
