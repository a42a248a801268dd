// TcpStoreServer: the store's server, one Asio io_context on its own thread serving every
// connection. Binds and listens in the constructor (throws IoError naming host:port,
// AddressInUseError when the port is taken); the destructor stops the thread and closes
// every connection.
// A malformed, oversized or truncated frame, a bad token or a stale generation closes only
// that connection, with a logged reason; everyone else keeps being served.
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
  size_t max_bytes = kDefaultStoreMaxBytes;  // keys and values; see StoreData
  size_t max_keys = kDefaultStoreMaxKeys;
};

class TcpStoreServer {
 public:
  explicit TcpStoreServer(TcpStoreServerOptions options);
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  int port() const;
  std::string address() const;  // "host:port" as bound
  // Connections closed for a protocol violation so far (malformed frame, bad token, ...).
  int64_t rejected_connections() const;
  // Frame headers read so far, whether the frame was then served or rejected.
  int64_t frames_received() const;

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace ringgrad::comm
