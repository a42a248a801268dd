// TcpStoreServer: the store's server, one Asio io_context on its own thread serving every
// connection. Binds and listens in the constructor (throws IoError naming host:port,
// AddressInUseError when the port is taken); the destructor stops the thread and closes
// every connection.
// A malformed, oversized or truncated frame, a bad token or a stale generation closes only
// that connection, with a logged reason; everyone else keeps being served. Memory is bounded:
// keys and values, and every request from the moment its header announces its size, count
// against one cap; connections and connections yet to say hello are capped too.
// A launcher's store also serves each generation's workers on a port of their own
// (open_worker_listener), in ringgrad's protocol or PyTorch's TCPStore protocol, as torchrun's
// agent store does (Note [One store per job] in tcp_store_server.cpp).
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "comm/store/store_data.h"
#include "comm/store/store_wire.h"

namespace ringgrad::comm {

class AddressInUseError : public IoError {
 public:
  using IoError::IoError;
};

struct TcpStoreServerOptions {
  std::string host = "127.0.0.1";  // "0.0.0.0" listens on every interface
  int port = 0;                    // 0: an ephemeral port, read it back with port()
  std::string token;               // non-empty: clients must present the same token
  int64_t generation = -1;         // >= 0: clients of another generation are refused
  uint32_t max_frame_bytes = kDefaultMaxFrameBytes;
  size_t max_bytes = kDefaultStoreMaxBytes;  // keys, values and requests arriving; see StoreData
  size_t max_keys = kDefaultStoreMaxKeys;
  size_t max_connections = kDefaultStoreMaxConnections;
};

class TcpStoreServer {
 public:
  explicit TcpStoreServer(TcpStoreServerOptions options);
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  int port() const;
  std::string address() const;  // "host:port" as bound

  // Listens for the workers of one generation on a fresh port of the same host, and returns
  // the port. Its clients see only that generation's keys; ringgrad clients must give the token
  // and this generation, PyTorch clients (no token in their protocol) must come from loopback
  // as this process's user, or, when a token is set, from a host a token holder connected from.
  int open_worker_listener(int64_t generation);
  // Stops listening for that generation, closes its clients and forgets its keys.
  void close_worker_listener(int64_t generation);
  // Connections closed for a protocol violation so far (malformed frame, bad token, ...).
  int64_t rejected_connections() const;
  // Requests read so far, whether then served or rejected.
  int64_t frames_received() const;
  int64_t open_connections() const;
  // Bytes of requests announced or received and not yet served: what clients make us hold.
  size_t arriving_bytes() const;

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace ringgrad::comm
