// TcpStoreServer: Asio acceptors and one StoreConnection per client (store_connection.cpp),
// all driven by one io_context thread, so the key table needs no lock. A get/wait that cannot
// be answered yet parks on its connection (one pending request per connection; the clients
// are synchronous) and is answered by the write that completes it or by its timer.
//
// Note [One store per job]
// A job under ringgrad-run has one store, the launcher's, as a torchrun job has its agent's.
// The launchers meet on its main port; each generation's workers get a port of their own
// (MASTER_PORT), where ringgrad workers say hello with the job's token and generation and
// PyTorch workers (TORCHELASTIC_USE_AGENT_STORE=True) speak PyTorch's TCPStore protocol. Both
// see only "worker/<generation>/..." keys, so no worker can touch the rendezvous, nor a
// straggler of one generation the next. PyTorch's protocol carries no token, so its clients
// are admitted by where they come from: loopback clients must run as this process's user;
// with a token set, other clients must come from a host a token holder (a launcher) connected
// from. The port listens where the main one does (loopback for --standalone, bind_addr), and
// everything a client sends counts against the store's caps from its first byte.
#include "comm/store/tcp_store_server.h"

#include <unistd.h>

#include <future>

#include "comm/store/socket_owner.h"
#include "comm/store/tcp_store_server_impl.h"
#include "core/logging.h"

namespace ringgrad::comm {

using asio::ip::tcp;

namespace {
// At most this many clients may be connected without having said hello: each may send a few
// KiB and is dropped after 10 s, so strangers cannot hold much, nor crowd out the job.
constexpr int64_t kMaxClientsBeforeHello = 256;
// After a failed accept (out of file descriptors, say) the listener retries after this long.
constexpr std::chrono::milliseconds kAcceptRetry{100};

std::string worker_key_prefix(int64_t generation) { return str_cat("worker/", generation, "/"); }
}  // namespace

TcpStoreServer::Impl::Impl(TcpStoreServerOptions opts)
    : options(std::move(opts)),
      data(store_max_bytes_from_env(options.max_bytes), store_max_keys_from_env(options.max_keys)) {
  options.max_connections = store_max_connections_from_env(options.max_connections);
  main_listener = listen(options.port, options.generation, "", /*serves_torch=*/false);
  port = main_listener->acceptor.local_endpoint().port();
  address = str_cat(options.host, ":", port);
  accept_next(main_listener);
  thread = std::thread([this] { io.run(); });
}

TcpStoreServer::Impl::~Impl() {
  io.stop();
  thread.join();
}

std::shared_ptr<StoreListener> TcpStoreServer::Impl::listen(int at_port, int64_t generation,
                                                            std::string key_prefix,
                                                            bool serves_torch) {
  auto l = std::make_shared<StoreListener>(io);
  l->generation = generation;
  l->key_prefix = std::move(key_prefix);
  l->serves_torch = serves_torch;
  try {
    tcp::endpoint ep(asio::ip::make_address(options.host), static_cast<uint16_t>(at_port));
    l->acceptor.open(ep.protocol());
    l->acceptor.set_option(asio::socket_base::reuse_address(true));
    l->acceptor.bind(ep);
    l->acceptor.listen();
  } catch (const std::system_error& e) {
    if (e.code() == asio::error::address_in_use)
      RG_THROW(AddressInUseError, "cannot listen on ", options.host, ":", at_port,
               " for the store: address already in use (another process holds this port; "
               "choose another port, or 0 for a free one)");
    RG_THROW(IoError, "cannot listen on ", options.host, ":", at_port,
             " for the store: ", e.code().message());
  }
  return l;
}

void TcpStoreServer::Impl::accept_next(const std::shared_ptr<StoreListener>& listener) {
  listener->acceptor.async_accept([this, listener](const asio::error_code& ec, tcp::socket s) {
    if (ec == asio::error::operation_aborted || !listener->acceptor.is_open()) return;
    if (!ec) {
      admit(listener, std::move(s));
      return accept_next(listener);
    }
    log_warn("store ", address, ": accept failed: ", ec.message());
    auto retry = std::make_shared<asio::steady_timer>(io, kAcceptRetry);
    retry->async_wait([this, listener, retry](const asio::error_code&) { accept_next(listener); });
  });
}

void TcpStoreServer::Impl::admit(const std::shared_ptr<StoreListener>& listener,
                                 tcp::socket socket) {
  asio::error_code ignored;
  socket.set_option(tcp::no_delay(true), ignored);
  auto conn = std::make_shared<StoreConnection>(*this, std::move(socket), listener);
  if (open.load() > static_cast<int64_t>(options.max_connections))
    return conn->reject(str_cat("too many connections (the most is ", options.max_connections,
                                ", RINGGRAD_STORE_MAX_CONNECTIONS on the store's host)"));
  // Past the cap of clients yet to say hello the oldest of them goes: a genuine client says
  // hello at once, so a flood of strangers evicts only strangers.
  while (before_hello > kMaxClientsBeforeHello && !awaiting_hello.empty()) {
    auto oldest = awaiting_hello.front().lock();
    awaiting_hello.pop_front();
    if (oldest && !oldest->said_hello())
      oldest->reject(str_cat("evicted: more than ", kMaxClientsBeforeHello,
                             " connections have yet to say hello, and this is the oldest"));
  }
  if (awaiting_hello.size() > 2 * kMaxClientsBeforeHello)  // forget those long past hello
    awaiting_hello.erase(std::remove_if(awaiting_hello.begin(), awaiting_hello.end(),
                                        [](auto& w) {
                                          auto c = w.lock();
                                          return !c || c->said_hello();
                                        }),
                         awaiting_hello.end());
  awaiting_hello.push_back(conn);
  auto& list = listener->connections;
  list.erase(std::remove_if(list.begin(), list.end(), [](auto& w) { return w.expired(); }),
             list.end());
  list.push_back(conn);
  conn->start();
}

void TcpStoreServer::Impl::log_rejection(const std::string& peer, const std::string& reason) {
  // A fuzzer or port scanner can cause thousands of these: log the first few, then sample.
  const int64_t n = ++rejected;
  if (n <= 10 || n % 10000 == 0)
    log_warn("store ", address, " closed the connection from ", peer, ": ", reason, " (", n,
             " rejected so far)");
}

bool TcpStoreServer::Impl::hold(size_t before, size_t after) {
  const size_t others = arriving.load() - before;
  if (after > before && data.bytes() + others + after > data.max_bytes()) return false;
  arriving = others + after;
  return true;
}

std::string TcpStoreServer::Impl::torch_refusal(const StoreConnection& conn) const {
  asio::error_code ec1, ec2;
  const auto peer = conn.socket().remote_endpoint(ec1);
  const auto local = conn.socket().local_endpoint(ec2);
  if (ec1 || ec2) return "the connection has no address";
  if (peer.address().is_loopback()) {
    const auto owner = loopback_socket_owner(peer.address().to_string(), peer.port(),
                                             local.address().to_string(), local.port());
    if (!owner) return "cannot tell which user's process opened this loopback connection";
    if (*owner != ::geteuid())
      return str_cat("a PyTorch client on loopback run by uid ", *owner, ", not by uid ",
                     ::geteuid(), " as the job is (PyTorch's protocol carries no token)");
    return "";
  }
  if (options.token.empty() || token_holder_hosts.count(peer.address().to_string())) return "";
  return str_cat("a PyTorch client (whose protocol carries no token) from ",
                 peer.address().to_string(), ", a host no launcher with the job's token came from");
}

std::optional<StoreReply> TcpStoreServer::Impl::serve(StoreConnection& conn,
                                                      const StoreRequest& r) {
  StoreReply reply;
  switch (r.verb) {
    case StoreVerb::set:
    case StoreVerb::multi_set:
      for (size_t i = 0; i < r.keys.size(); ++i) {
        data.put(r.keys[i], r.values[i]);
        key_written(r.keys[i]);
      }
      return reply;
    case StoreVerb::append:
      data.append(r.keys[0], r.values[0]);
      key_written(r.keys[0]);
      return reply;
    case StoreVerb::add:
      reply.number = data.add(r.keys[0], r.number);
      key_written(r.keys[0]);
      return reply;
    case StoreVerb::compare_set:
      reply.values = {data.compare_set(r.keys[0], r.values[0], r.values[1])};
      key_written(r.keys[0]);
      return reply;
    case StoreVerb::check:
      data.check_key_count(r.keys.size());
      reply.flag = data.has_all(r.keys);
      return reply;
    case StoreVerb::delete_key: reply.flag = data.erase(r.keys[0]); return reply;
    case StoreVerb::num_keys: {
      const std::string& prefix = conn.key_prefix();
      reply.number = static_cast<int64_t>(prefix.empty() ? data.size() : data.count_prefix(prefix));
      return reply;
    }
    case StoreVerb::ping: reply.number = r.number; return reply;
    case StoreVerb::get:
    case StoreVerb::wait:
    case StoreVerb::multi_get:
      data.check_key_count(r.keys.size());
      if (data.has_all(r.keys)) return answer_ready(r);
      for (const auto& k : r.keys) watchers[k].push_back(conn.weak_from_this());
      conn.park(r);
      return std::nullopt;
    case StoreVerb::hello:
    case StoreVerb::cancel_wait: break;  // the connection's own business
  }
  RG_THROW(Error, "store: request of kind ", static_cast<int>(r.verb), " reached serve()");
}

StoreReply TcpStoreServer::Impl::answer_ready(const StoreRequest& r) const {
  StoreReply reply;
  if (r.verb != StoreVerb::wait)
    for (const auto& k : r.keys) reply.values.push_back(*data.find(k));
  return reply;
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
                              [](const std::weak_ptr<StoreConnection>& w) {
                                auto conn = w.lock();
                                return !conn || !conn->waiting();
                              }),
               list.end());
    if (list.empty()) watchers.erase(it);
  }
}

namespace {
// Runs fn on the server's io thread and returns its result (or rethrows what it threw).
template <class Fn>
auto on_io_thread(asio::io_context& io, Fn fn) {
  std::packaged_task<decltype(fn())()> task(std::move(fn));
  auto result = task.get_future();
  asio::post(io, [&task] { task(); });
  return result.get();
}
}  // namespace

TcpStoreServer::TcpStoreServer(TcpStoreServerOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {}
TcpStoreServer::~TcpStoreServer() = default;
int TcpStoreServer::port() const { return impl_->port; }
std::string TcpStoreServer::address() const { return impl_->address; }
int64_t TcpStoreServer::rejected_connections() const { return impl_->rejected.load(); }
int64_t TcpStoreServer::frames_received() const { return impl_->frames.load(); }
int64_t TcpStoreServer::open_connections() const { return impl_->open.load(); }
size_t TcpStoreServer::arriving_bytes() const { return impl_->arriving.load(); }

int TcpStoreServer::open_worker_listener(int64_t generation) {
  Impl& s = *impl_;
  return on_io_thread(s.io, [&s, generation] {
    RG_CHECK(!s.worker_listeners.count(generation), "generation ", generation,
             " already has a workers' listener");
    auto l = s.listen(0, generation, worker_key_prefix(generation), /*serves_torch=*/true);
    s.worker_listeners[generation] = l;
    s.accept_next(l);
    return static_cast<int>(l->acceptor.local_endpoint().port());
  });
}

void TcpStoreServer::close_worker_listener(int64_t generation) {
  Impl& s = *impl_;
  on_io_thread(s.io, [&s, generation] {
    auto it = s.worker_listeners.find(generation);
    if (it == s.worker_listeners.end()) return;
    asio::error_code ignored;
    it->second->acceptor.close(ignored);
    for (auto& weak : it->second->connections)
      if (auto conn = weak.lock()) conn->close();
    s.data.erase_prefix(it->second->key_prefix);
    s.worker_listeners.erase(it);
  });
}

}  // namespace ringgrad::comm
