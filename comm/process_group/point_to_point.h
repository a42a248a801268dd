// PointToPoint: a process group's send and recv, matched as PyTorch and Gloo match them: per
// (source, destination, tag), in issue order within each, and a receive from any source takes
// the earliest message of its tag. Collectives never come here; they run in lockstep over the
// group's mesh, and mixing messages into that byte stream would make their order matter.
//
// Each rank listens on a TCP port of its own, published in the store when the group is made.
// A rank's first send to a peer connects to it, and that connection carries that direction's
// messages only: a header (tag, bytes), then the payload. Sends are eager: one completes once
// its bytes are in the socket, whether or not the peer has posted the receive yet; a message
// that arrives before its receive waits in memory until one matches. One thread, started at
// the first send or receive, moves every byte, so each call returns at once, and two ranks
// that both receive before they send do not wait for each other.
#pragma once
#include <atomic>
#include <deque>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/process_group/process_group.h"
#include "comm/process_group/work.h"
#include "comm/store/store.h"
#include "comm/transport/socket/socket.h"

namespace ringgrad::comm {

class PointToPoint {
 public:
  // Listens on `address` and publishes the port under `<key_prefix>p2p/<rank>`. Peers accept
  // only connections whose handshake carries the same `run_hash` and `generation`.
  PointToPoint(std::shared_ptr<Store> store, std::string key_prefix, int rank, int size,
               const std::string& address, const std::string& run_id, int64_t generation);
  ~PointToPoint();  // fails whatever is still pending ("the group was destroyed"), then joins

  // `data` stays valid and untouched until the Work completes. Errors (`timeout` passed, a
  // peer gone, a size that differs from the matching message) complete the Work.
  // `keep` is held until then (the tensor that owns `data`); a receive's `finish` runs on the
  // engine thread once its bytes are in, before the Work completes (a copy to the GPU, say).
  WorkPtr send(int peer, int64_t tag, const void* data, size_t bytes, Milliseconds timeout,
               std::shared_ptr<const void> keep);
  std::shared_ptr<RecvWork> recv(int peer, int64_t tag, void* data, size_t bytes,
                                 Milliseconds timeout, std::shared_ptr<const void> keep,
                                 std::function<void()> finish = {});

 private:
  struct Header {
    int64_t tag;
    uint64_t bytes;
  };
  struct Send {
    int peer;
    Header header;
    const char* data;
    size_t done = 0;  // bytes of header and payload written
    Milliseconds timeout;
    Clock::time_point deadline;
    WorkPtr work;
    std::shared_ptr<const void> keep;
  };
  struct Recv {
    int source;  // or kAnySource
    int64_t tag;
    char* data;
    size_t bytes;
    Milliseconds timeout;
    Clock::time_point deadline;
    std::shared_ptr<RecvWork> work;
    std::shared_ptr<const void> keep;
    std::function<void()> finish;
    void arrived(int from);  // runs finish, completes the Work
  };
  // A message whose header came before any matching receive: its payload lands here.
  struct Early {
    int source;
    int64_t tag;
    std::vector<char> payload;
    size_t received = 0;
    std::shared_ptr<Recv> claimed;  // a receive posted while the payload was still arriving
  };
  // One incoming connection: the message being read and where its payload goes.
  struct Incoming {
    int source;
    net::Socket socket;
    Header header{};
    size_t header_got = 0;
    size_t left = 0;                   // payload bytes still to read
    std::shared_ptr<Recv> into;        // the matched receive, or
    std::list<Early>::iterator early;  // the early message (when `into` is null and left > 0)
    bool reading_payload = false;
    bool closed = false;
  };

  void start_thread();  // under mu_
  void loop();
  void take_posted();                       // moves calls from inbox_ into the engine's state
  void post_recv(std::shared_ptr<Recv> r);  // engine thread
  bool write_sends(int peer);
  void hung_up(int peer);
  void connect(int peer, Clock::time_point deadline);
  bool accept_one();
  void read_incoming(Incoming& in);
  void header_done(Incoming& in);
  void payload_done(Incoming& in);
  void expire(Clock::time_point now);
  bool connected_from(int source) const;           // a connection of its own has come in
  void suspect_gone(int source, std::string why);  // gone, unless it connects in the grace
  void fail_source(int source, const std::string& why);
  void fail_everything(const std::string& why);
  static std::string describe(const char* what, int peer, int64_t tag, size_t bytes);

  std::shared_ptr<Store> store_;
  std::string prefix_;
  int rank_;
  int size_;
  uint64_t run_hash_;
  int64_t generation_;
  net::Socket listener_;
  UniqueFd wake_;  // eventfd: calls posted, or stopping

  std::mutex mu_;  // guards inbox_, stopping_ and the thread's start
  std::vector<Send> inbox_sends_;
  std::vector<std::shared_ptr<Recv>> inbox_recvs_;
  bool stopping_ = false;
  std::thread thread_;

  // The engine thread's own state.
  std::vector<net::Socket> outgoing_;        // per peer, connected at the first send
  std::vector<std::deque<Send>> sends_;      // per peer, in issue order
  std::list<std::shared_ptr<Recv>> posted_;  // receives with no message yet, in issue order
  std::list<Early> early_;                   // messages with no receive yet, in arrival order
  std::vector<std::unique_ptr<Incoming>> incoming_;
  std::map<int, std::string> gone_;  // ranks whose connection closed, and how
  // Ranks that refused a connection or hung up before any connection of theirs came in: their
  // receives fail with `why` at `until` unless one comes first (kLateConnectionGrace).
  struct Unreachable {
    std::string why;
    Clock::time_point until;
  };
  std::map<int, Unreachable> unreachable_;
};

}  // namespace ringgrad::comm
