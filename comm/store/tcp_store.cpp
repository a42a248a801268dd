// TcpStore: a blocking client built from Asio async operations run to a deadline on a private
// io_context (run_one_until), which gives every socket operation a timeout without threads.
#include "comm/store/tcp_store.h"

#include <asio.hpp>
#include <mutex>
#include <random>
#include <thread>

namespace ringgrad::comm {

using asio::ip::tcp;
using Clock = std::chrono::steady_clock;

namespace {
// Extra time the client allows beyond a server-side get/wait timeout before it gives up on
// the connection: covers the reply's trip and a busy server.
constexpr Milliseconds kReplyGrace{10'000};
constexpr Milliseconds kMaxBackoff{1'000};
}  // namespace

class TcpStore::Impl {
 public:
  explicit Impl(TcpStoreOptions opts) : options(std::move(opts)) {
    address = str_cat(options.host, ":", options.port);
  }

  void connect();
  void hello();
  // Sends one request frame and returns the reply body, or throws (and marks the connection
  // lost) if it cannot within `budget`.
  std::string roundtrip(const std::string& frame, Milliseconds budget, const std::string& what);
  // Runs one async operation to completion or the deadline; returns its error code.
  template <class Start>
  asio::error_code run_until(Clock::time_point deadline, bool& timed_out, Start start);
  [[noreturn]] void lost(const std::string& what, const std::string& reason);

  TcpStoreOptions options;
  std::string address;
  asio::io_context io;
  tcp::socket socket{io};
  std::mutex mu;
  std::string broken;  // non-empty once the connection is lost: why
};

template <class Start>
asio::error_code TcpStore::Impl::run_until(Clock::time_point deadline, bool& timed_out,
                                           Start start) {
  bool done = false;
  asio::error_code result;
  start([&](const asio::error_code& ec, auto&&...) {
    result = ec;
    done = true;
  });
  io.restart();
  while (!done && io.run_one_until(deadline) > 0) {
  }
  timed_out = !done;
  if (!done) {  // cancel the operation and let its handler run before `done` goes out of scope
    asio::error_code ignored;
    socket.close(ignored);
    io.restart();
    io.run();
  }
  return result;
}

void TcpStore::Impl::lost(const std::string& what, const std::string& reason) {
  broken = reason;
  asio::error_code ignored;
  socket.close(ignored);
  RG_THROW(IoError, "store connection lost (", address, ") during ", what, ": ", reason);
}

void TcpStore::Impl::connect() {
  const auto deadline = Clock::now() + options.connect_timeout;
  Milliseconds backoff{10};
  std::minstd_rand jitter(std::random_device{}());
  std::string last_error = "no attempt made";
  for (;;) {
    asio::error_code ec;
    tcp::resolver resolver(io);
    auto endpoints = resolver.resolve(options.host, std::to_string(options.port), ec);
    if (!ec) {
      bool timed_out = false;
      // The last attempt starts at the deadline: a moment of its own lets it report its cause
      // (a refused connection, say) rather than a timeout it never had a chance to avoid.
      const auto attempt_deadline = std::max(deadline, Clock::now() + kMaxBackoff);
      ec = run_until(attempt_deadline, timed_out,
                     [&](auto handler) { asio::async_connect(socket, endpoints, handler); });
      if (!ec && !timed_out) break;
      last_error = timed_out ? "connect attempt timed out" : ec.message();
      asio::error_code ignored;
      socket.close(ignored);
    } else {
      last_error = "cannot resolve host '" + options.host + "': " + ec.message();
    }
    const auto now = Clock::now();
    if (now >= deadline)
      RG_THROW(TimeoutError, "could not connect to the store at ", address, " within ",
               format_duration(options.connect_timeout), " (last error: ", last_error,
               "); is the launcher of node rank 0 running, and is ", address,
               " reachable from this host?");
    auto pause = backoff + Milliseconds(jitter() % (backoff.count() / 2 + 1));
    std::this_thread::sleep_for(std::min<Clock::duration>(pause, deadline - now));
    backoff = std::min(backoff * 2, kMaxBackoff);
  }
  asio::error_code ignored;
  socket.set_option(tcp::no_delay(true), ignored);
}

std::string TcpStore::Impl::roundtrip(const std::string& frame, Milliseconds budget,
                                      const std::string& what) {
  if (!broken.empty())
    RG_THROW(IoError, "store connection lost (", address, ") earlier: ", broken, "; cannot run ",
             what);
  const auto deadline = Clock::now() + budget;
  bool timed_out = false;
  auto check = [&](const asio::error_code& ec) {
    if (timed_out) lost(what, str_cat("no reply within ", format_duration(budget)));
    if (ec == asio::error::eof || ec == asio::error::connection_reset)
      lost(what, "the server closed the connection");
    if (ec) lost(what, ec.message());
  };
  check(run_until(deadline, timed_out,
                  [&](auto handler) { asio::async_write(socket, asio::buffer(frame), handler); }));
  unsigned char header[kFrameHeaderBytes];
  check(run_until(deadline, timed_out,
                  [&](auto handler) { asio::async_read(socket, asio::buffer(header), handler); }));
  const uint32_t n = decode_frame_length(header);
  if (n == 0 || n > options.max_frame_bytes)
    lost(what, str_cat("reply frame length ", n, " is outside 1..", options.max_frame_bytes,
                       " (is ", address, " a ringgrad store?)"));
  std::string body(n, '\0');
  check(run_until(deadline, timed_out,
                  [&](auto handler) { asio::async_read(socket, asio::buffer(body), handler); }));
  return body;
}

void TcpStore::Impl::hello() {
  std::string body;
  try {
    body = roundtrip(FrameWriter()
                         .u8(static_cast<uint8_t>(StoreOp::hello))
                         .u32(kStoreMagic)
                         .str(options.token)
                         .i64(options.generation)
                         .frame(),
                     std::min(options.connect_timeout, kReplyGrace), "hello");
  } catch (const IoError&) {
    RG_THROW(IoError, "the process listening on ", address,
             " did not complete the ringgrad store handshake (is it another program, or a "
             "store that refused this client?): ",
             broken);
  }
  FrameReader in(body);
  const auto status = static_cast<StoreStatus>(in.u8());
  if (status == StoreStatus::ok) return;
  const std::string why = status == StoreStatus::error ? in.str() : "unexpected reply";
  broken = "refused: " + why;
  if (why.find("token") != std::string::npos)
    RG_THROW(IoError, "the store at ", address, " refused this client: ", why,
             "; give every node and worker the same RINGGRAD_STORE_TOKEN (or --rdzv-conf token=)");
  RG_THROW(IoError, "the store at ", address, " refused this client: ", why);
}

TcpStore::TcpStore(TcpStoreOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {
  set_timeout(impl_->options.timeout);
  impl_->connect();
  impl_->hello();
}

TcpStore::~TcpStore() = default;

std::string TcpStore::address() const { return impl_->address; }

std::string TcpStore::local_ip() const {
  asio::error_code ec;
  auto ep = impl_->socket.local_endpoint(ec);
  RG_CHECK(!ec, "store client for ", impl_->address, " has no local endpoint: ", ec.message());
  return ep.address().to_string();
}

FrameReader TcpStore::request(const FrameWriter& frame, Milliseconds budget,
                              const std::string& what, bool* timed_out) {
  std::string body;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    body = impl_->roundtrip(frame.frame(), budget, what);
  }
  FrameReader in(std::move(body));
  const auto status = static_cast<StoreStatus>(in.u8());
  if (status == StoreStatus::error)
    RG_THROW(InvalidArgument, "store ", impl_->address, " rejected ", what, ": ", in.str());
  if (status == StoreStatus::timeout && timed_out) {
    *timed_out = true;
  } else if (status != StoreStatus::ok) {
    RG_THROW(ProtocolError, "store ", impl_->address, " sent status ", static_cast<int>(status),
             " for ", what);
  }
  return in;
}

namespace {
FrameWriter op_frame(StoreOp op) {
  FrameWriter w;
  w.u8(static_cast<uint8_t>(op));
  return w;
}
}  // namespace

void TcpStore::set(const std::string& key, const std::string& value) {
  request(op_frame(StoreOp::set).str(key).str(value), timeout(), "set '" + key + "'");
}

std::string TcpStore::get(const std::string& key, Milliseconds timeout) {
  bool timed_out = false;
  auto in = request(op_frame(StoreOp::get).str(key).i64(timeout.count()), timeout + kReplyGrace,
                    "get '" + key + "'", &timed_out);
  if (timed_out) throw_store_timeout("get", {key}, timeout, impl_->address);
  return in.str();
}

int64_t TcpStore::add(const std::string& key, int64_t delta) {
  return request(op_frame(StoreOp::add).str(key).i64(delta), timeout(), "add '" + key + "'").i64();
}

std::string TcpStore::compare_set(const std::string& key, const std::string& expected,
                                  const std::string& desired) {
  return request(op_frame(StoreOp::compare_set).str(key).str(expected).str(desired), timeout(),
                 "compare_set '" + key + "'")
      .str();
}

void TcpStore::wait(const std::vector<std::string>& keys, Milliseconds timeout) {
  bool timed_out = false;
  auto in = request(op_frame(StoreOp::wait).strs(keys).i64(timeout.count()), timeout + kReplyGrace,
                    "wait", &timed_out);
  if (timed_out) throw_store_timeout("wait", in.strs(), timeout, impl_->address);
}

bool TcpStore::check(const std::vector<std::string>& keys) {
  return request(op_frame(StoreOp::check).strs(keys), timeout(), "check").u8() != 0;
}

bool TcpStore::delete_key(const std::string& key) {
  return request(op_frame(StoreOp::delete_key).str(key), timeout(), "delete_key '" + key + "'")
             .u8() != 0;
}

int64_t TcpStore::num_keys() {
  return request(op_frame(StoreOp::num_keys), timeout(), "num_keys").i64();
}

}  // namespace ringgrad::comm
