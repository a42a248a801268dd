// Internals of TcpStoreServer shared by its two files: the server (tcp_store_server.cpp:
// listeners, caps, the store's operations, parked waits) and one client's connection
// (store_connection.cpp: bytes in and out, which protocol, hello, what it holds). Everything
// here runs on the server's io_context thread, except the atomics read by the accessors.
#pragma once
#include <asio.hpp>
#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "comm/store/store_data.h"
#include "comm/store/store_request.h"
#include "comm/store/tcp_store_server.h"

namespace ringgrad::comm {

class StoreConnection;

// Where connections come in, and what their clients may see and speak.
struct StoreListener {
  explicit StoreListener(asio::io_context& io) : acceptor(io) {}
  asio::ip::tcp::acceptor acceptor;
  int64_t generation = -1;    // a ringgrad client's hello must name it (-1: any)
  std::string key_prefix;     // put before every key its clients name
  bool serves_torch = false;  // PyTorch's TCPStore protocol accepted (the workers' listeners)
  std::vector<std::weak_ptr<StoreConnection>> connections;
};

class TcpStoreServer::Impl {
 public:
  explicit Impl(TcpStoreServerOptions opts);
  ~Impl();

  std::shared_ptr<StoreListener> listen(int port, int64_t generation, std::string key_prefix,
                                        bool serves_torch);
  void accept_next(const std::shared_ptr<StoreListener>& listener);
  void admit(const std::shared_ptr<StoreListener>& listener, asio::ip::tcp::socket socket);
  // Serves one request of a client past its hello (keys already under its listener's
  // prefix): the reply, or none when the request parked on `conn` until its keys exist.
  // Throws InvalidArgument for a request the data cannot satisfy.
  std::optional<StoreReply> serve(StoreConnection& conn, const StoreRequest& request);
  // The reply to a get/wait/multi_get whose keys all exist.
  StoreReply answer_ready(const StoreRequest& request) const;
  void key_written(const std::string& key);
  // Forgets watcher entries of connections no longer waiting (answered, timed out, closed).
  void prune_watchers(const std::vector<std::string>& keys);
  void log_rejection(const std::string& peer, const std::string& reason);
  // "" when `conn` may speak PyTorch's protocol (which carries no token), else why not.
  std::string torch_refusal(const StoreConnection& conn) const;
  // A connection now holds `after` bytes of requests in flight instead of `before`: false, and
  // nothing changed, when that would take keys, values and such bytes past the memory cap.
  bool hold(size_t before, size_t after);

  TcpStoreServerOptions options;
  int port = 0;
  std::string address;
  asio::io_context io;
  StoreData data;
  std::shared_ptr<StoreListener> main_listener;
  std::map<int64_t, std::shared_ptr<StoreListener>> worker_listeners;
  std::unordered_map<std::string, std::vector<std::weak_ptr<StoreConnection>>> watchers;
  std::set<std::string> token_holder_hosts;  // addresses a client with the token came from
  int64_t before_hello = 0;                  // connections yet to say hello
  std::deque<std::weak_ptr<StoreConnection>> awaiting_hello;  // oldest first
  std::atomic<size_t> arriving{0};  // bytes of requests in flight, all connections
  std::atomic<int64_t> open{0}, rejected{0}, frames{0};
  std::thread thread;
};

// One client: reads its bytes, tells its protocol from the first few, holds it to a hello
// (ringgrad: token and generation; PyTorch: the validation magic, or for PyTorch 1.x its first
// request, and the listener's rules),
// then serves request after request, one at a time: the next is read only once the reply to
// the last is written, so a client that does not read its replies makes us hold nothing.
// What a request's headers announce counts against the store's cap before its bytes arrive;
// beyond that a connection holds at most one read's piece (4 KiB).
class StoreConnection : public std::enable_shared_from_this<StoreConnection> {
 public:
  StoreConnection(TcpStoreServer::Impl& server, asio::ip::tcp::socket socket,
                  std::shared_ptr<StoreListener> listener);
  void start();
  // Closes a misbehaving client with a reset (a flood of bad connections, say a fuzzer's,
  // leaves no TIME_WAIT entries behind), logging why.
  void reject(const std::string& reason);
  void close();
  // Parks a get/wait/multi_get until its keys exist, or for ringgrad clients its timeout.
  void park(StoreRequest request);
  void try_complete();  // answers the parked request if its keys now exist
  bool waiting() const { return pending_.has_value() && !closed_; }
  bool said_hello() const { return authenticated_ || closed_; }
  const std::string& peer() const { return peer_; }
  const asio::ip::tcp::socket& socket() const { return socket_; }
  const std::string& key_prefix() const { return listener_->key_prefix; }

 private:
  enum class Protocol { unknown, ringgrad, torch, torch_legacy };
  bool speaks_torch() const {
    return protocol_ == Protocol::torch || protocol_ == Protocol::torch_legacy;
  }
  void read_more();
  void advance();  // serves what the received bytes hold, then reads or waits for a write
  ParsedRequest parse_front();
  void handle(StoreRequest request);
  void handle_hello(const StoreRequest& hello);
  void respond(StoreVerb verb, StoreReply reply, bool then_close = false);
  void send(std::string bytes, bool then_close);
  void write_next();
  void withdraw_pending();
  // A request that would take the store past its memory cap: a ringgrad client past its hello
  // gets an error reply once the request's bytes have been skipped (so its connection stays
  // usable, and nothing of it is held); anyone else is closed. False when it closed.
  bool refuse_over_cap(size_t bytes);
  // Skips the refused request's bytes as they arrive; once past them, replies with the
  // refusal and returns true.
  bool drop_refused_request();

  TcpStoreServer::Impl& server_;
  asio::ip::tcp::socket socket_;
  asio::steady_timer timer_;  // the hello deadline, then a parked wait's timeout
  std::shared_ptr<StoreListener> listener_;
  std::string peer_;
  Protocol protocol_ = Protocol::unknown;
  bool authenticated_ = false;
  std::string inbox_;      // received, not yet served
  size_t needed_ = 0;      // the length of the request at the inbox's front, as far as known
  size_t held_ = 0;        // what hold() has counted for this connection
  size_t discarding_ = 0;  // bytes of a refused request still to skip
  std::string refusal_;    // and what to tell its client then
  bool reading_ = false;
  std::vector<std::string> outbox_;
  std::optional<StoreRequest> pending_;
  bool close_after_write_ = false;
  bool closed_ = false;
};

}  // namespace ringgrad::comm
