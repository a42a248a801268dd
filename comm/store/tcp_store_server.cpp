// TcpStoreServer: an Asio acceptor and one Connection object per client, all driven by one
// io_context thread, so the key table needs no lock. A get/wait that cannot be answered yet
// parks on its connection (one pending request per connection; the client is synchronous)
// and is answered by the write that completes it or by its timer.
#include "comm/store/tcp_store_server.h"

#include <algorithm>
#include <asio.hpp>
#include <atomic>
#include <optional>
#include <thread>
#include <unordered_map>

#include "comm/store/store.h"
#include "core/logging.h"

namespace ringgrad::comm {

using asio::ip::tcp;

namespace {
// A client that connects but never says hello is closed after this long.
constexpr std::chrono::seconds kHelloDeadline{10};
// Longer get/wait timeouts are cut to this, keeping the timer arithmetic far from overflow.
constexpr int64_t kMaxWaitMs = int64_t{30} * 24 * 3600 * 1000;

class Connection;
}  // namespace

class TcpStoreServer::Impl {
 public:
  explicit Impl(TcpStoreServerOptions opts);
  ~Impl();

  void accept_next();
  // Serves one request body; throws ProtocolError for anything malformed.
  void handle(const std::shared_ptr<Connection>& conn, const std::string& body);
  void key_written(const std::string& key);
  // Forgets watcher entries of connections no longer waiting (timed out, closed).
  void prune_watchers(const std::vector<std::string>& keys);
  void log_rejection(const std::string& peer, const std::string& reason);

  TcpStoreServerOptions options;
  int port = 0;
  std::string address;
  asio::io_context io;
  tcp::acceptor acceptor{io};
  StoreData data;
  std::unordered_map<std::string, std::vector<std::weak_ptr<Connection>>> watchers;
  std::atomic<int64_t> rejected{0};
  std::atomic<int64_t> frames{0};
  std::thread thread;
};

namespace {

struct PendingWait {
  std::vector<std::string> keys;
  bool is_get = false;  // a get answers with the value of keys[0]
};

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(TcpStoreServer::Impl& server, tcp::socket socket)
      : server_(server), socket_(std::move(socket)), timer_(server.io) {
    asio::error_code ec;
    auto ep = socket_.remote_endpoint(ec);
    peer_ = ec ? "unknown peer" : str_cat(ep.address().to_string(), ":", ep.port());
  }

  void start() {
    auto self = shared_from_this();
    timer_.expires_after(kHelloDeadline);
    timer_.async_wait([this, self](const asio::error_code& ec) {
      if (!ec && !authenticated_) reject("no hello within 10 s");
    });
    read_header();
  }

  void reply(std::string frame, bool then_close = false) {
    if (closed_) return;
    outbox_.push_back(std::move(frame));
    close_after_write_ = close_after_write_ || then_close;
    if (outbox_.size() == 1) write_next();
  }

  // Closes a misbehaving client with a reset: a flood of bad connections (a fuzzer, a port
  // scanner) then leaves no TIME_WAIT entries behind.
  void reject(const std::string& reason) {
    if (closed_) return;
    server_.log_rejection(peer_, reason);
    asio::error_code ignored;
    socket_.set_option(asio::socket_base::linger(true, 0), ignored);
    close();
  }

  // Parks a get/wait until its keys exist or `timeout_ms` passes.
  void park(PendingWait wait, int64_t timeout_ms) {
    pending_ = std::move(wait);
    auto self = shared_from_this();
    const int64_t wait_ms = std::clamp<int64_t>(timeout_ms, 0, kMaxWaitMs);
    timer_.expires_after(std::chrono::milliseconds(wait_ms));
    timer_.async_wait([this, self](const asio::error_code& ec) {
      if (ec || !pending_) return;
      std::vector<std::string> missing;
      for (const auto& k : pending_->keys)
        if (!server_.data.contains(k)) missing.push_back(k);
      const auto keys = std::move(pending_->keys);
      pending_.reset();
      server_.prune_watchers(keys);
      reply(FrameWriter().u8(static_cast<uint8_t>(StoreStatus::timeout)).strs(missing).frame());
    });
  }

  // Answers the parked request if all its keys now exist.
  void try_complete() {
    if (!pending_ || closed_ || !server_.data.has_all(pending_->keys)) return;
    FrameWriter w;
    w.u8(static_cast<uint8_t>(StoreStatus::ok));
    if (pending_->is_get) w.str(*server_.data.find(pending_->keys[0]));
    pending_.reset();
    timer_.cancel();
    reply(w.frame());
  }

  bool waiting() const { return pending_.has_value() && !closed_; }
  bool authenticated_ = false;
  const std::string& peer() const { return peer_; }

 private:
  void read_header() {
    auto self = shared_from_this();
    asio::async_read(
        socket_, asio::buffer(header_), [this, self](const asio::error_code& ec, std::size_t) {
          if (ec) return close();  // the client went away between requests: not an error
          ++server_.frames;
          const uint32_t n = decode_frame_length(header_);
          // Before the hello nobody is known: a stranger may not make us buffer megabytes.
          const uint32_t limit = authenticated_ ? server_.options.max_frame_bytes : kMaxHelloBytes;
          if (n == 0 || n > limit)
            return reject(str_cat("frame length ", n, " outside 1..", limit));
          body_.resize(n);
          asio::async_read(
              socket_, asio::buffer(body_), [this, self](const asio::error_code& ec2, std::size_t) {
                if (ec2) return reject("truncated frame: connection ended inside a frame body");
                dispatch();
              });
        });
  }

  void dispatch() {
    auto self = shared_from_this();
    try {
      if (pending_) RG_THROW(ProtocolError, "a request arrived while a wait was pending");
      server_.handle(self, body_);
    } catch (const ProtocolError& e) {
      return reject(e.what());
    } catch (const InvalidArgument& e) {  // a well-formed request the data cannot satisfy
      // The sentence alone: the client shows it to a user, who has no use for our source lines.
      reply(FrameWriter().u8(static_cast<uint8_t>(StoreStatus::error)).str(e.message()).frame());
    }
    if (!closed_) read_header();
  }

  void write_next() {
    auto self = shared_from_this();
    asio::async_write(socket_, asio::buffer(outbox_.front()),
                      [this, self](const asio::error_code& ec, std::size_t) {
                        if (ec) return close();
                        outbox_.erase(outbox_.begin());
                        if (!outbox_.empty()) return write_next();
                        if (close_after_write_) close();
                      });
  }

  void close() {
    if (closed_) return;
    closed_ = true;
    if (pending_) {
      const auto keys = std::move(pending_->keys);
      pending_.reset();
      server_.prune_watchers(keys);
    }
    asio::error_code ignored;
    timer_.cancel();
    socket_.shutdown(tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
  }

  TcpStoreServer::Impl& server_;
  tcp::socket socket_;
  asio::steady_timer timer_;
  std::string peer_;
  unsigned char header_[kFrameHeaderBytes] = {};
  std::string body_;
  std::vector<std::string> outbox_;
  std::optional<PendingWait> pending_;
  bool close_after_write_ = false;
  bool closed_ = false;
};

std::string ok_frame() { return FrameWriter().u8(static_cast<uint8_t>(StoreStatus::ok)).frame(); }

}  // namespace

TcpStoreServer::Impl::Impl(TcpStoreServerOptions opts)
    : options(std::move(opts)),
      data(store_max_bytes_from_env(options.max_bytes), store_max_keys_from_env(options.max_keys)) {
  try {
    tcp::endpoint ep(asio::ip::make_address(options.host), static_cast<uint16_t>(options.port));
    acceptor.open(ep.protocol());
    acceptor.set_option(asio::socket_base::reuse_address(true));
    acceptor.bind(ep);
    acceptor.listen();
  } catch (const std::system_error& e) {
    if (e.code() == asio::error::address_in_use)
      RG_THROW(AddressInUseError, "cannot listen on ", options.host, ":", options.port,
               " for the store: address already in use (another process holds this port; "
               "choose another port, or 0 for a free one)");
    RG_THROW(IoError, "cannot listen on ", options.host, ":", options.port,
             " for the store: ", e.code().message());
  }
  port = acceptor.local_endpoint().port();
  address = str_cat(options.host, ":", port);
  accept_next();
  thread = std::thread([this] { io.run(); });
}

TcpStoreServer::Impl::~Impl() {
  io.stop();
  thread.join();
}

void TcpStoreServer::Impl::accept_next() {
  acceptor.async_accept([this](const asio::error_code& ec, tcp::socket socket) {
    if (!ec) {
      asio::error_code ignored;
      socket.set_option(tcp::no_delay(true), ignored);
      std::make_shared<Connection>(*this, std::move(socket))->start();
    } else if (ec == asio::error::operation_aborted) {
      return;
    } else {
      log_warn("store ", address, ": accept failed: ", ec.message());
    }
    accept_next();
  });
}

void TcpStoreServer::Impl::log_rejection(const std::string& peer, const std::string& reason) {
  // A fuzzer or port scanner can cause thousands of these: log the first few, then sample.
  const int64_t n = ++rejected;
  if (n <= 10 || n % 10000 == 0)
    log_warn("store ", address, " closed the connection from ", peer, ": ", reason, " (", n,
             " rejected so far)");
}

void TcpStoreServer::Impl::key_written(const std::string& key) {
  auto it = watchers.find(key);
  if (it == watchers.end()) return;
  auto waiting = std::move(it->second);
  watchers.erase(it);
  for (auto& weak : waiting)
    if (auto conn = weak.lock()) conn->try_complete();
  // Those still parked wait for other keys too; they stay registered under this one as well.
  for (auto& weak : waiting)
    if (auto conn = weak.lock(); conn && conn->waiting()) watchers[key].push_back(weak);
}

void TcpStoreServer::Impl::prune_watchers(const std::vector<std::string>& keys) {
  for (const auto& key : keys) {
    auto it = watchers.find(key);
    if (it == watchers.end()) continue;
    auto& list = it->second;
    list.erase(std::remove_if(list.begin(), list.end(),
                              [](const std::weak_ptr<Connection>& w) {
                                auto conn = w.lock();
                                return !conn || !conn->waiting();
                              }),
               list.end());
    if (list.empty()) watchers.erase(it);
  }
}

void TcpStoreServer::Impl::handle(const std::shared_ptr<Connection>& conn,
                                  const std::string& body) {
  FrameReader in(body);
  const auto op = static_cast<StoreOp>(in.u8());
  if (!conn->authenticated_) {
    if (op != StoreOp::hello) RG_THROW(ProtocolError, "first request is not a hello");
    const std::string refusal = hello_refusal(in, options.token, options.generation);
    if (!refusal.empty()) {
      log_rejection(conn->peer(), "refused: " + refusal);
      conn->reply(FrameWriter().u8(static_cast<uint8_t>(StoreStatus::error)).str(refusal).frame(),
                  /*then_close=*/true);
      return;
    }
    conn->authenticated_ = true;
    conn->reply(ok_frame());
    return;
  }
  FrameWriter out;
  out.u8(static_cast<uint8_t>(StoreStatus::ok));
  switch (op) {
    case StoreOp::set: {
      std::string key = in.str();
      std::string value = in.str();
      in.expect_end();
      data.put(key, std::move(value));
      conn->reply(out.frame());
      key_written(key);
      return;
    }
    case StoreOp::get:
    case StoreOp::wait: {
      PendingWait wait;
      wait.is_get = op == StoreOp::get;
      if (wait.is_get)
        wait.keys.push_back(in.str());
      else
        wait.keys = in.strs();
      const int64_t timeout_ms = in.i64();
      in.expect_end();
      data.check_key_count(wait.keys.size());
      if (data.has_all(wait.keys)) {
        if (wait.is_get) out.str(*data.find(wait.keys[0]));
        conn->reply(out.frame());
        return;
      }
      for (const auto& k : wait.keys) watchers[k].push_back(conn);
      conn->park(std::move(wait), timeout_ms);
      return;
    }
    case StoreOp::add: {
      std::string key = in.str();
      const int64_t delta = in.i64();
      in.expect_end();
      conn->reply(out.i64(data.add(key, delta)).frame());
      key_written(key);
      return;
    }
    case StoreOp::compare_set: {
      std::string key = in.str();
      std::string expected = in.str();
      std::string desired = in.str();
      in.expect_end();
      conn->reply(out.str(data.compare_set(key, expected, desired)).frame());
      key_written(key);
      return;
    }
    case StoreOp::check: {
      auto keys = in.strs();
      in.expect_end();
      data.check_key_count(keys.size());
      conn->reply(out.u8(data.has_all(keys) ? 1 : 0).frame());
      return;
    }
    case StoreOp::delete_key: {
      std::string key = in.str();
      in.expect_end();
      conn->reply(out.u8(data.erase(key) ? 1 : 0).frame());
      return;
    }
    case StoreOp::num_keys:
      in.expect_end();
      conn->reply(out.i64(static_cast<int64_t>(data.size())).frame());
      return;
    case StoreOp::hello: RG_THROW(ProtocolError, "second hello on one connection");
  }
  RG_THROW(ProtocolError, "unknown store op ", static_cast<int>(op));
}

TcpStoreServer::TcpStoreServer(TcpStoreServerOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {}
TcpStoreServer::~TcpStoreServer() = default;
int TcpStoreServer::port() const { return impl_->port; }
std::string TcpStoreServer::address() const { return impl_->address; }
int64_t TcpStoreServer::rejected_connections() const { return impl_->rejected.load(); }
int64_t TcpStoreServer::frames_received() const { return impl_->frames.load(); }

}  // namespace ringgrad::comm
