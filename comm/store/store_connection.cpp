// StoreConnection: one client of a TcpStoreServer (tcp_store_server_impl.h), from its first
// bytes to its close.
#include <algorithm>

#include "comm/store/store_wire.h"
#include "comm/store/tcp_store_server_impl.h"
#include "comm/store/torch_store_wire.h"
#include "core/logging.h"

namespace ringgrad::comm {

using asio::ip::tcp;

namespace {
// A client that connects but never says hello is closed after this long.
constexpr std::chrono::seconds kHelloDeadline{10};
// Longer get/wait timeouts are cut to this, keeping the timer arithmetic far from overflow.
constexpr int64_t kMaxWaitMs = int64_t{30} * 24 * 3600 * 1000;
// Received bytes are read in pieces of at most this (more only when a frame's header
// announced more, which was counted against the cap first).
constexpr size_t kReadPiece = 4096;
}  // namespace

StoreConnection::StoreConnection(TcpStoreServer::Impl& server, tcp::socket socket,
                                 std::shared_ptr<StoreListener> listener)
    : server_(server),
      socket_(std::move(socket)),
      timer_(server.io),
      listener_(std::move(listener)) {
  asio::error_code ec;
  auto ep = socket_.remote_endpoint(ec);
  peer_ = ec ? "unknown peer" : str_cat(ep.address().to_string(), ":", ep.port());
  ++server_.open;
  ++server_.before_hello;
}

void StoreConnection::start() {
  auto self = shared_from_this();
  timer_.expires_after(kHelloDeadline);
  timer_.async_wait([this, self](const asio::error_code& ec) {
    if (!ec && !authenticated_) reject(str_cat("no hello within ", kHelloDeadline.count(), " s"));
  });
  read_more();
}

void StoreConnection::reject(const std::string& reason) {
  if (closed_) return;
  server_.log_rejection(peer_, reason);
  asio::error_code ignored;
  socket_.set_option(asio::socket_base::linger(true, 0), ignored);
  close();
}

void StoreConnection::close() {
  if (closed_) return;
  closed_ = true;
  --server_.open;
  if (!authenticated_) --server_.before_hello;
  server_.hold(held_, 0);
  held_ = 0;
  withdraw_pending();
  asio::error_code ignored;
  timer_.cancel();
  socket_.shutdown(tcp::socket::shutdown_both, ignored);
  socket_.close(ignored);
}

void StoreConnection::read_more() {
  if (reading_ || closed_) return;
  reading_ = true;
  // Read into the inbox's tail: up to what the request is known to need, which hold() counted.
  const size_t have = inbox_.size();
  const size_t want = std::max(kReadPiece, needed_ > have ? needed_ - have : 0);
  inbox_.resize(have + want);
  auto self = shared_from_this();
  socket_.async_read_some(asio::buffer(&inbox_[have], want),
                          [this, self, have](const asio::error_code& ec, std::size_t n) {
                            reading_ = false;
                            inbox_.resize(have + (ec ? 0 : n));
                            if (closed_) return;
                            if (!ec) return advance();
                            // Between requests the client simply went away: not an error.
                            if (inbox_.empty()) return close();
                            ++server_.frames;
                            reject("truncated frame: connection ended inside a request");
                          });
}

void StoreConnection::advance() {
  // During a read the inbox's tail is the read's buffer; the read's completion comes back here.
  if (reading_) return;
  while (!closed_ && outbox_.empty()) {
    if (discarding_ > 0 && !drop_refused_request()) return read_more();
    ParsedRequest parsed;
    try {
      parsed = parse_front();
    } catch (const ProtocolError& e) {
      ++server_.frames;
      return reject(e.message());
    }
    if (!server_.hold(held_, parsed.declared)) {
      if (!refuse_over_cap(parsed.declared)) return;
      continue;
    }
    held_ = parsed.declared;
    needed_ = parsed.declared;
    if (!parsed.complete) return read_more();
    ++server_.frames;
    inbox_.erase(0, parsed.consumed);
    if (inbox_.capacity() > 2 * kReadPiece && inbox_.size() <= kReadPiece) inbox_.shrink_to_fit();
    handle(std::move(parsed.request));
  }
}

ParsedRequest StoreConnection::parse_front() {
  if (protocol_ == Protocol::unknown) {
    const bool current = matches_torch_validate(inbox_);
    const bool legacy = matches_torch_legacy_start(inbox_);
    if ((current && inbox_.size() < kTorchValidateBytes) ||
        (legacy && inbox_.size() < kTorchLegacyStartBytes)) {
      ParsedRequest more;
      more.declared = inbox_.size();
      return more;
    }
    protocol_ = current ? Protocol::torch : legacy ? Protocol::torch_legacy : Protocol::ringgrad;
    if (speaks_torch() && !listener_->serves_torch)
      RG_THROW(ProtocolError,
               "PyTorch's TCPStore protocol is served on the workers' port "
               "(their MASTER_PORT) only, not here");
    // PyTorch 1.x's form has no hello: the listener's rules apply to its first request.
    if (protocol_ == Protocol::torch_legacy) {
      if (const std::string refusal = server_.torch_refusal(*this); !refusal.empty())
        RG_THROW(ProtocolError, "refused: ", refusal);
      authenticated_ = true;
      --server_.before_hello;
    }
  }
  const size_t limit = authenticated_ ? server_.options.max_frame_bytes : kMaxHelloBytes;
  if (!speaks_torch()) return parse_store_frame(inbox_, static_cast<uint32_t>(limit));
  return parse_torch_request(
      inbox_, limit,
      protocol_ == Protocol::torch_legacy ? TorchDialect::legacy : TorchDialect::current);
}

bool StoreConnection::refuse_over_cap(size_t bytes) {
  const size_t cap = server_.data.max_bytes();
  std::string why = str_cat(
      "store is full: a request of ", bytes, " bytes would take it past its memory cap of ",
      cap % (1u << 20) == 0 ? str_cat(cap >> 20, " MiB") : str_cat(cap, " bytes"), " (",
      server_.data.bytes(), " bytes held in keys and values, ", server_.arriving.load() - held_,
      " in other requests arriving; RINGGRAD_STORE_MAX_MB on the store's host raises it)");
  ++server_.frames;
  if (protocol_ != Protocol::ringgrad || !authenticated_) {
    reject(why);
    return false;
  }
  log_warn("store ", server_.address, " refused a request from ", peer_, ": ", why);
  discarding_ = bytes;
  refusal_ = std::move(why);
  needed_ = 0;
  return true;
}

bool StoreConnection::drop_refused_request() {
  const size_t n = std::min(discarding_, inbox_.size());
  inbox_.erase(0, n);
  discarding_ -= n;
  if (discarding_ > 0) return false;
  StoreReply reply;
  reply.status = StoreReply::Status::error;
  reply.error = std::move(refusal_);
  respond(StoreVerb::set, std::move(reply));
  return true;
}

void StoreConnection::handle(StoreRequest request) {
  if (!authenticated_) {
    if (request.verb != StoreVerb::hello) return reject("first request is not a hello");
    return handle_hello(request);
  }
  if (request.verb == StoreVerb::hello) return reject("second hello on one connection");
  if (pending_ && request.verb != StoreVerb::cancel_wait)
    return reject("a request arrived while a wait was pending");
  if (request.verb == StoreVerb::cancel_wait) {
    withdraw_pending();
    return respond(StoreVerb::cancel_wait, StoreReply());
  }
  for (auto& key : request.keys) key = listener_->key_prefix + key;
  std::optional<StoreReply> reply;
  try {
    reply = server_.serve(*this, request);
  } catch (const InvalidArgument& e) {  // a well-formed request the data cannot satisfy
    // PyTorch's protocol has no error reply: all we can do is close, saying why in our log.
    if (speaks_torch()) return reject("refused a request: " + e.message());
    reply = StoreReply();
    reply->status = StoreReply::Status::error;
    // The sentence alone: the client shows it to a user, who has no use for our source lines.
    reply->error = e.message();
  }
  if (reply) respond(request.verb, std::move(*reply));
}

void StoreConnection::handle_hello(const StoreRequest& hello) {
  const bool torch = protocol_ == Protocol::torch;
  const std::string refusal =
      torch ? server_.torch_refusal(*this)
            : hello_refusal(hello, server_.options.token, listener_->generation);
  if (!refusal.empty()) {
    if (torch) return reject("refused: " + refusal);
    server_.log_rejection(peer_, "refused: " + refusal);
    StoreReply reply;
    reply.status = StoreReply::Status::error;
    reply.error = refusal;
    return respond(StoreVerb::hello, reply, /*then_close=*/true);
  }
  authenticated_ = true;
  --server_.before_hello;
  asio::error_code ec;
  const auto ep = socket_.remote_endpoint(ec);
  if (!torch && !ec && !server_.options.token.empty())
    server_.token_holder_hosts.insert(ep.address().to_string());
  respond(StoreVerb::hello, StoreReply());
}

void StoreConnection::park(StoreRequest request) {
  pending_ = std::move(request);
  if (pending_->timeout_ms < 0) return;  // PyTorch's: until the client cancels it
  auto self = shared_from_this();
  timer_.expires_after(std::chrono::milliseconds(std::min(pending_->timeout_ms, kMaxWaitMs)));
  timer_.async_wait([this, self](const asio::error_code& ec) {
    if (ec || !pending_) return;
    StoreReply reply;
    reply.status = StoreReply::Status::timeout;
    for (const auto& k : pending_->keys)
      if (!server_.data.contains(k)) reply.values.push_back(k.substr(listener_->key_prefix.size()));
    const StoreVerb verb = pending_->verb;
    withdraw_pending();
    respond(verb, std::move(reply));
  });
}

void StoreConnection::try_complete() {
  if (!pending_ || closed_ || !server_.data.has_all(pending_->keys)) return;
  StoreReply reply = server_.answer_ready(*pending_);
  const StoreVerb verb = pending_->verb;
  withdraw_pending();
  timer_.cancel();
  respond(verb, std::move(reply));
}

void StoreConnection::withdraw_pending() {
  if (!pending_) return;
  const auto keys = std::move(pending_->keys);
  pending_.reset();
  server_.prune_watchers(keys);
}

void StoreConnection::respond(StoreVerb verb, StoreReply reply, bool then_close) {
  std::string bytes =
      speaks_torch() ? encode_torch_reply(verb, reply) : encode_store_reply(verb, reply);
  if (!bytes.empty() || then_close) send(std::move(bytes), then_close);
}

void StoreConnection::send(std::string bytes, bool then_close) {
  if (closed_) return;
  close_after_write_ = close_after_write_ || then_close;
  if (bytes.empty()) return close();
  outbox_.push_back(std::move(bytes));
  if (outbox_.size() == 1) write_next();
}

void StoreConnection::write_next() {
  auto self = shared_from_this();
  asio::async_write(socket_, asio::buffer(outbox_.front()),
                    [this, self](const asio::error_code& ec, std::size_t) {
                      if (ec) return close();
                      outbox_.erase(outbox_.begin());
                      if (!outbox_.empty()) return write_next();
                      if (close_after_write_) return close();
                      advance();
                    });
}

}  // namespace ringgrad::comm
