// PointToPoint: the engine thread's loop, connections, and matching messages to receives.
#include "comm/process_group/point_to_point.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "core/logging.h"

namespace ringgrad::comm {

namespace {

constexpr uint32_t kHelloMagic = 0x52475032;  // "RGP2"
constexpr int kSocketBufferBytes = 4 << 20;
// How long an accepted connection may take to say who it is before it is dropped (a stranger
// must not hold the engine up).
constexpr auto kHelloTimeout = std::chrono::seconds(2);
// How long a peer that looks gone may still turn out to have sent something. Its connect can
// return, its bytes go out and its listener close before the kernel has put the connection in
// this rank's accept queue (loopback hands each CPU's packets on separately, and under load
// later): a refusal or hang-up from it proves nothing until this has passed.
constexpr auto kLateConnectionGrace = std::chrono::seconds(2);

struct Hello {
  uint32_t magic;
  int32_t from_rank;
  int32_t to_rank;
  int64_t generation;
  uint64_t run_hash;
};

template <class E>
std::exception_ptr error(const std::string& message) {
  return std::make_exception_ptr(E(message));
}

}  // namespace

std::string PointToPoint::describe(const char* what, int peer, int64_t tag, size_t bytes) {
  const std::string who = peer == kAnySource ? "any rank" : "rank " + std::to_string(peer);
  return str_cat(what, who, " (tag ", tag, ", ", bytes, " bytes)");
}

PointToPoint::PointToPoint(std::shared_ptr<Store> store, std::string key_prefix, int rank, int size,
                           const std::string& address, const std::string& run_id,
                           int64_t generation)
    : store_(std::move(store)),
      prefix_(std::move(key_prefix)),
      rank_(rank),
      size_(size),
      run_hash_(std::hash<std::string>()(run_id)),
      generation_(generation),
      wake_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)),
      outgoing_(static_cast<size_t>(size)),
      sends_(static_cast<size_t>(size)) {
  if (!wake_.valid()) RG_THROW(IoError, "eventfd failed: ", std::strerror(errno));
  int port = 0;
  listener_ = net::listen_on(address, port);
  ::fcntl(listener_.fd(), F_SETFL, ::fcntl(listener_.fd(), F_GETFL, 0) | O_NONBLOCK);
  store_->set(prefix_ + "p2p/" + std::to_string(rank), address + ":" + std::to_string(port));
}

PointToPoint::~PointToPoint() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t rc = ::write(wake_.get(), &one, sizeof one);
  if (thread_.joinable()) thread_.join();
  // Calls posted after the thread stopped, or with no thread ever started.
  for (Send& s : inbox_sends_)
    s.work->complete(error<Error>(s.work->description() + ": the process group was destroyed"));
  for (auto& r : inbox_recvs_)
    r->work->complete(error<Error>(r->work->description() + ": the process group was destroyed"));
}

// ---- the callers' side: post, wake the engine ----

WorkPtr PointToPoint::send(int peer, int64_t tag, const void* data, size_t bytes,
                           Milliseconds timeout, std::shared_ptr<const void> keep) {
  auto work = std::make_shared<Work>(describe("send to ", peer, tag, bytes));
  {
    std::lock_guard<std::mutex> lock(mu_);
    inbox_sends_.push_back(Send{peer, Header{tag, bytes}, static_cast<const char*>(data), 0,
                                timeout, Clock::now() + timeout, work, std::move(keep)});
    start_thread();
  }
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t rc = ::write(wake_.get(), &one, sizeof one);
  return work;
}

std::shared_ptr<RecvWork> PointToPoint::recv(int peer, int64_t tag, void* data, size_t bytes,
                                             Milliseconds timeout, std::shared_ptr<const void> keep,
                                             std::function<void()> finish) {
  auto work = std::make_shared<RecvWork>(describe("recv from ", peer, tag, bytes));
  {
    std::lock_guard<std::mutex> lock(mu_);
    inbox_recvs_.push_back(std::make_shared<Recv>(Recv{peer, tag, static_cast<char*>(data), bytes,
                                                       timeout, Clock::now() + timeout, work,
                                                       std::move(keep), std::move(finish)}));
    start_thread();
  }
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t rc = ::write(wake_.get(), &one, sizeof one);
  return work;
}

void PointToPoint::Recv::arrived(int from) {
  try {
    if (finish) finish();
  } catch (...) {
    return work->complete_from(from, std::current_exception());
  }
  work->complete_from(from);
}

void PointToPoint::start_thread() {
  if (!thread_.joinable() && !stopping_) thread_ = std::thread([this] { loop(); });
}

// ---- the engine thread ----

void PointToPoint::loop() {
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) break;
    }
    take_posted();
    std::vector<pollfd> fds{{wake_.get(), POLLIN, 0}, {listener_.fd(), POLLIN, 0}};
    std::vector<int> writers;  // every connected peer: to write to, and to notice it is gone
    for (int p = 0; p < size_; ++p)
      if (outgoing_[p].valid()) {
        fds.push_back({outgoing_[p].fd(),
                       static_cast<short>(POLLRDHUP | (sends_[p].empty() ? 0 : POLLOUT)), 0});
        writers.push_back(p);
      }
    for (const auto& in : incoming_) fds.push_back({in->socket.fd(), POLLIN, 0});
    // Sleep until something moves or the first deadline passes.
    const auto now = Clock::now();
    auto next = now + std::chrono::seconds(1);
    for (const auto& queue : sends_)
      for (const Send& s : queue) next = std::min(next, s.deadline);
    for (const auto& r : posted_) next = std::min(next, r->deadline);
    for (const auto& [source, u] : unreachable_) next = std::min(next, u.until);
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(next - now).count();
    const int rc = ::poll(fds.data(), fds.size(), static_cast<int>(std::max<int64_t>(ms + 1, 0)));
    if (rc < 0 && errno != EINTR) {
      fail_everything(str_cat("poll failed: ", std::strerror(errno)));
      break;
    }
    if (fds[0].revents) {
      uint64_t count;
      [[maybe_unused]] ssize_t n = ::read(wake_.get(), &count, sizeof count);
    }
    if (fds[1].revents)
      while (accept_one()) {
      }
    // Incoming bytes first: a peer that sent and then exited has its messages read before
    // its hang-up fails what still waits for it.
    for (size_t i = 0; i < incoming_.size() && 2 + writers.size() + i < fds.size(); ++i)
      if (fds[2 + writers.size() + i].revents) read_incoming(*incoming_[i]);
    for (size_t i = 0; i < writers.size(); ++i) {
      const short ev = fds[2 + i].revents;
      if (ev & (POLLRDHUP | POLLHUP | POLLERR))
        hung_up(writers[i]);
      else if (ev & POLLOUT)
        write_sends(writers[i]);
    }
    incoming_.erase(std::remove_if(incoming_.begin(), incoming_.end(),
                                   [](const auto& in) { return in->closed; }),
                    incoming_.end());
    expire(Clock::now());
  }
  fail_everything("the process group was destroyed");
}

void PointToPoint::take_posted() {
  std::vector<Send> sends;
  std::vector<std::shared_ptr<Recv>> recvs;
  {
    std::lock_guard<std::mutex> lock(mu_);
    sends.swap(inbox_sends_);
    recvs.swap(inbox_recvs_);
  }
  for (Send& s : sends) {
    const int peer = s.peer;
    sends_[peer].push_back(std::move(s));
    if (outgoing_[peer].valid()) {
      write_sends(peer);
      continue;
    }
    try {
      connect(peer, sends_[peer].front().deadline);
      write_sends(peer);
    } catch (...) {
      for (Send& failed : sends_[peer]) failed.work->complete(std::current_exception());
      sends_[peer].clear();
    }
  }
  for (auto& r : recvs) post_recv(std::move(r));
}

// The peer published its port when its group was made, before any group could return, and
// listened on it before that: one attempt, since a refused connection means it is gone (retrying
// until the deadline would hold this thread, and every other send and receive, for minutes).
void PointToPoint::connect(int peer, Clock::time_point deadline) {
  const std::string what = str_cat("rank ", rank_, " connecting to rank ", peer, " for sends");
  const std::string published = store_->get(prefix_ + "p2p/" + std::to_string(peer),
                                            std::chrono::duration_cast<Milliseconds>(std::max(
                                                deadline - Clock::now(), Clock::duration(0))));
  const auto colon = published.rfind(':');
  RG_CHECK(colon != std::string::npos, "malformed address '", published, "' in the store");
  net::Socket s = net::connect_until(
      {published.substr(0, colon), std::stoi(published.substr(colon + 1))}, Clock::now(), what);
  net::tune_stream(s, kSocketBufferBytes);
  const Hello hello{kHelloMagic, rank_, peer, generation_, run_hash_};
  net::write_fully(s, &hello, sizeof hello, deadline, what);
  outgoing_[peer] = std::move(s);
}

// Writes what the socket takes of the peer's queued sends; a send completes once its last
// byte is in the socket.
bool PointToPoint::write_sends(int peer) {
  auto& queue = sends_[peer];
  bool moved = false;
  while (!queue.empty()) {
    Send& s = queue.front();
    iovec iov[2];
    int n = 0;
    if (s.done < sizeof(Header))
      iov[n++] = {reinterpret_cast<char*>(&s.header) + s.done, sizeof(Header) - s.done};
    const size_t payload_done = s.done > sizeof(Header) ? s.done - sizeof(Header) : 0;
    if (s.header.bytes > payload_done)
      iov[n++] = {const_cast<char*>(s.data) + payload_done, s.header.bytes - payload_done};
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<size_t>(n);
    const ssize_t sent = ::sendmsg(outgoing_[peer].fd(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent < 0) {
      if (errno == EAGAIN || errno == EINTR) break;
      const std::string why = std::strerror(errno);
      for (Send& failed : queue)
        failed.work->complete(error<IoError>(
            str_cat(failed.work->description(), ": rank ", peer, " is gone (", why, ")")));
      queue.clear();
      outgoing_[peer].close();
      break;
    }
    moved = true;
    s.done += static_cast<size_t>(sent);
    if (s.done < sizeof(Header) + s.header.bytes) break;  // the socket is full
    s.work->complete();
    queue.pop_front();
  }
  return moved;
}

// The peer closed the connection this rank sends on: it exited or destroyed its group.
void PointToPoint::hung_up(int peer) {
  const std::string why = str_cat("rank ", peer,
                                  " closed its connection (it exited or destroyed "
                                  "its process group)");
  for (Send& failed : sends_[peer])
    failed.work->complete(error<IoError>(str_cat(failed.work->description(), ": ", why)));
  sends_[peer].clear();
  outgoing_[peer].close();
  // Messages it sent before come on its own connection, whose end fails the rest.
  if (!connected_from(peer)) suspect_gone(peer, why);
}

// Takes one connection waiting on the (non-blocking) listener; false when none waits.
bool PointToPoint::accept_one() {
  net::Socket s(::accept4(listener_.fd(), nullptr, nullptr, SOCK_CLOEXEC));
  if (!s.valid()) return false;
  Hello hello{};
  try {
    net::read_fully(s, &hello, sizeof hello, Clock::now() + kHelloTimeout,
                    "reading a send connection's handshake");
  } catch (const std::exception& e) {
    log_warn("rank ", rank_, ": dropped a connection to its send/recv port: ", user_message(e));
    return true;
  }
  if (hello.magic != kHelloMagic || hello.to_rank != rank_ || hello.from_rank < 0 ||
      hello.from_rank >= size_ || hello.from_rank == rank_ || hello.run_hash != run_hash_ ||
      hello.generation != generation_) {
    log_warn("rank ", rank_,
             ": refused a connection to its send/recv port: not a peer of this "
             "group (another run, generation or program)");
    return true;
  }
  net::tune_stream(s, kSocketBufferBytes);
  auto in = std::make_unique<Incoming>();
  in->source = hello.from_rank;
  in->socket = std::move(s);
  unreachable_.erase(in->source);  // its connection's end now says when it is gone
  in->early = early_.end();
  incoming_.push_back(std::move(in));
  return true;
}

void PointToPoint::read_incoming(Incoming& in) {
  for (;;) {
    char* to;
    size_t want;
    if (!in.reading_payload) {
      to = reinterpret_cast<char*>(&in.header) + in.header_got;
      want = sizeof(Header) - in.header_got;
    } else if (in.into) {
      to = in.into->data + (in.into->bytes - in.left);
      want = in.left;
    } else {
      to = in.early->payload.data() + in.early->received;
      want = in.left;
    }
    const ssize_t n = ::recv(in.socket.fd(), to, want, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
    if (n <= 0) {
      const std::string why = n == 0 ? "closed its connection"
                                     : str_cat("lost its connection (", std::strerror(errno), ")");
      if (in.into)
        in.into->work->complete_from(
            in.source, error<IoError>(str_cat(in.into->work->description(), ": rank ", in.source,
                                              " ", why, " in the middle of the message")));
      if (in.reading_payload && !in.into) {
        if (in.early->claimed)
          in.early->claimed->work->complete_from(
              in.source,
              error<IoError>(str_cat(in.early->claimed->work->description(), ": rank ", in.source,
                                     " ", why, " in the middle of the message")));
        early_.erase(in.early);
      }
      in.closed = true;
      fail_source(in.source, str_cat("rank ", in.source, " ", why,
                                     " (it exited or destroyed its process group)"));
      return;
    }
    if (!in.reading_payload) {
      in.header_got += static_cast<size_t>(n);
      if (in.header_got == sizeof(Header)) header_done(in);
    } else {
      in.left -= static_cast<size_t>(n);
      if (!in.into) in.early->received += static_cast<size_t>(n);
      if (in.left == 0) payload_done(in);
    }
  }
}

// A message's header is in: its payload goes to the first receive posted for it, else into
// memory until one is.
void PointToPoint::header_done(Incoming& in) {
  in.reading_payload = true;
  in.left = in.header.bytes;
  const auto match = std::find_if(posted_.begin(), posted_.end(), [&](const auto& r) {
    return (r->source == in.source || r->source == kAnySource) && r->tag == in.header.tag;
  });
  if (match != posted_.end() && (*match)->bytes == in.header.bytes) {
    in.into = *match;
    posted_.erase(match);
  } else {
    if (match != posted_.end()) {
      (*match)->work->complete_from(
          in.source,
          error<InvalidArgument>(str_cat((*match)->work->description(), ": rank ", in.source,
                                         " sent ", in.header.bytes,
                                         " bytes with that tag; both sides must pass tensors "
                                         "of the same size")));
      posted_.erase(match);
    }
    early_.push_back(
        Early{in.source, in.header.tag, std::vector<char>(in.header.bytes), 0, nullptr});
    in.early = std::prev(early_.end());
  }
  if (in.left == 0) payload_done(in);
}

void PointToPoint::payload_done(Incoming& in) {
  in.reading_payload = false;
  in.header_got = 0;
  if (in.into) {
    in.into->arrived(in.source);
    in.into.reset();
    return;
  }
  if (const auto& r = in.early->claimed) {
    std::memcpy(r->data, in.early->payload.data(), r->bytes);
    r->arrived(in.source);
    early_.erase(in.early);
  }
  in.early = early_.end();
}

// A receive takes the earliest message that arrived for it, else waits for one.
void PointToPoint::post_recv(std::shared_ptr<Recv> r) {
  for (auto it = early_.begin(); it != early_.end(); ++it) {
    if (it->claimed || it->tag != r->tag || (r->source != kAnySource && r->source != it->source))
      continue;
    if (it->payload.size() != r->bytes) {
      r->work->complete_from(it->source, error<InvalidArgument>(str_cat(
                                             r->work->description(), ": rank ", it->source,
                                             " sent ", it->payload.size(),
                                             " bytes with that tag; both sides must pass tensors "
                                             "of the same size")));
      return;
    }
    if (it->received < it->payload.size()) {  // still arriving: payload_done delivers it
      it->claimed = std::move(r);
      return;
    }
    std::memcpy(r->data, it->payload.data(), r->bytes);
    r->arrived(it->source);
    early_.erase(it);
    return;
  }
  if (r->source != kAnySource) {
    // A peer that sent and then went away left its connection waiting here: take it first,
    // so its messages count and its absence is not mistaken for having sent nothing.
    while (accept_one()) {
    }
    const bool connected = connected_from(r->source);
    if (!connected && gone_.count(r->source)) {
      r->work->complete_from(
          r->source, error<IoError>(str_cat(r->work->description(), ": ", gone_[r->source])));
      return;
    }
    // A connection to the source, even with nothing to send on it, tells this rank when the
    // source goes away before it ever sent anything.
    if (!connected && !outgoing_[r->source].valid() && !unreachable_.count(r->source)) {
      try {
        connect(r->source, r->deadline);
      } catch (const std::exception& e) {
        suspect_gone(r->source, str_cat("rank ", r->source,
                                        " sent nothing and cannot be reached (it exited or "
                                        "destroyed its process group?): ",
                                        user_message(e)));
      }
    }
  }
  posted_.push_back(std::move(r));
}

void PointToPoint::expire(Clock::time_point now) {
  for (auto it = unreachable_.begin(); it != unreachable_.end();) {
    if (it->second.until > now) {
      ++it;
      continue;
    }
    fail_source(it->first, it->second.why);
    it = unreachable_.erase(it);
  }
  for (auto it = posted_.begin(); it != posted_.end();) {
    const auto& r = *it;
    if (r->deadline > now) {
      ++it;
      continue;
    }
    r->work->complete_from(-1, error<TimeoutError>(str_cat(
                                   r->work->description(), ": Timed out after ",
                                   format_duration(r->timeout), " with no such message (did ",
                                   r->source == kAnySource ? std::string("any rank")
                                                           : "rank " + std::to_string(r->source),
                                   " send one with this tag?)")));
    it = posted_.erase(it);
  }
  for (int peer = 0; peer < size_; ++peer) {
    auto& queue = sends_[peer];
    if (queue.empty() ||
        std::none_of(queue.begin(), queue.end(), [&](const Send& s) { return s.deadline <= now; }))
      continue;
    // A send cut off half-way would leave the stream between the two ranks mid-message: the
    // connection goes, and the peer's receives from this rank fail.
    const bool cut = queue.front().done > 0 && queue.front().deadline <= now;
    for (auto it = queue.begin(); it != queue.end();) {
      if (!cut && it->deadline > now) {
        ++it;
        continue;
      }
      it->work->complete(error<TimeoutError>(
          str_cat(it->work->description(), ": Timed out after ", format_duration(it->timeout),
                  ": rank ", peer, " did not take the bytes (is it receiving, and still alive?)")));
      it = queue.erase(it);
    }
    if (cut) outgoing_[peer].close();
  }
}

bool PointToPoint::connected_from(int source) const {
  return std::any_of(incoming_.begin(), incoming_.end(),
                     [&](const auto& in) { return in->source == source; });
}

void PointToPoint::suspect_gone(int source, std::string why) {
  unreachable_.try_emplace(source,
                           Unreachable{std::move(why), Clock::now() + kLateConnectionGrace});
}

void PointToPoint::fail_source(int source, const std::string& why) {
  gone_[source] = why;
  for (auto it = posted_.begin(); it != posted_.end();) {
    if ((*it)->source != source) {
      ++it;
      continue;
    }
    (*it)->work->complete_from(source,
                               error<IoError>(str_cat((*it)->work->description(), ": ", why)));
    it = posted_.erase(it);
  }
}

void PointToPoint::fail_everything(const std::string& why) {
  auto fail = [&](Work& w) { w.complete(error<Error>(str_cat(w.description(), ": ", why))); };
  for (auto& queue : sends_) {
    for (Send& s : queue) fail(*s.work);
    queue.clear();
  }
  for (auto& r : posted_) fail(*r->work);
  posted_.clear();
  for (auto& e : early_)
    if (e.claimed) fail(*e.claimed->work);
  early_.clear();
  for (auto& in : incoming_)
    if (in->into) fail(*in->into->work);
  incoming_.clear();
  // Calls posted since the last pass are failed by the destructor.
}

}  // namespace ringgrad::comm
