#include "core/metrics.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <thread>

#include "common/fd.hpp"
#include "core/flight_recorder.hpp"

namespace braid::core {

namespace {

std::string escape(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

// The shortest text that reads back as the same double.
std::string num(double v) {
  char buf[40];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

void family(std::string& out, const char* name, const char* type, const char* unit,
            const char* help) {
  out += "# TYPE ";
  out += name;
  out += ' ';
  out += type;
  out += '\n';
  if (unit != nullptr) {
    out += "# UNIT ";
    out += name;
    out += ' ';
    out += unit;
    out += '\n';
  }
  out += "# HELP ";
  out += name;
  out += ' ';
  out += help;
  out += '\n';
}

}  // namespace

Metrics::Metrics(std::string commId, int rank, int size, OpCounters* fast)
    : commId_(std::move(commId)),
      rank_(rank),
      size_(size),
      fast_(fast != nullptr ? fast : &own_),
      straggler_(size) {}

double Metrics::bucketBound(int k) {
  return 1e-6 * std::pow(4.0, k);
}

void Metrics::opDone(Collective c, const char* algorithm, std::uint64_t bytes, std::int64_t ns) {
  static const char* const kNone = "-";
  if (algorithm == nullptr) algorithm = kNone;
  const auto ci = static_cast<std::size_t>(c);
  if (ci >= slots_.size()) return;
  const bool timed = ns >= 0;
  const std::uint64_t t = timed ? static_cast<std::uint64_t>(ns) : 0;
  // The bucket: the first k with t <= 1 us * 4^k.
  int k = 0;
  for (std::uint64_t bound = 1000; k < kBuckets && t > bound; bound *= 4) ++k;
  // The slot of this algorithm: found by its pointer, or claimed (the names are static).
  auto& row = slots_[ci];
  Slot* slot = &row[kAlgorithms - 1];
  for (Slot& x : row) {
    const char* a = x.algorithm.load(std::memory_order_acquire);
    if (a == algorithm) {
      slot = &x;
      break;
    }
    if (a == nullptr) {
      const char* expected = nullptr;
      if (x.algorithm.compare_exchange_strong(expected, algorithm, std::memory_order_acq_rel) ||
          expected == algorithm) {
        slot = &x;
        break;
      }
    }
  }
  if (isPointToPoint(c)) {
    slot->ops.fetch_add(1, std::memory_order_relaxed);
    slot->bytes.fetch_add(bytes, std::memory_order_relaxed);
    if (timed) {
      slot->ns.fetch_add(t, std::memory_order_relaxed);
      slot->buckets[k].fetch_add(1, std::memory_order_relaxed);
    }
    return;
  }
  if (ci < OpCounters::kCollectives && !timed) {
    OpCounters& f = *fast_;
    OpCounters::Entry& e = f.e_[ci];
    if (e.algorithm.load(std::memory_order_relaxed) != algorithm) {
      // This collective changed algorithm: move its counts into their series and count for the
      // new one from here on, as a sequence-lock write (render() retries around it).
      const std::uint64_t v = f.fold_.load(std::memory_order_relaxed);
      f.fold_.store(v + 1, std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_release);
      if (const int old = e.slot.load(std::memory_order_relaxed); old >= 0) {
        bump(row[old].ops, e.ops.load(std::memory_order_relaxed));
        bump(row[old].bytes, e.bytes.load(std::memory_order_relaxed));
      }
      e.ops.store(0, std::memory_order_relaxed);
      e.bytes.store(0, std::memory_order_relaxed);
      e.slot.store(static_cast<int>(slot - row.data()), std::memory_order_relaxed);
      e.algorithm.store(algorithm, std::memory_order_relaxed);
      f.fold_.store(v + 2, std::memory_order_release);
    }
    bump(e.ops, 1);
    bump(e.bytes, bytes);
    return;
  }
  bump(slot->ops, 1);
  bump(slot->bytes, bytes);
  if (timed) {
    bump(slot->ns, t);
    bump(slot->buckets[k], 1);
  }
}

void Metrics::opFailed(Collective c, ErrorCode code) {
  std::lock_guard<std::mutex> lk(mu_);
  for (ErrorCount& e : errors_)
    if (e.coll == c && e.code == code) {
      ++e.n;
      return;
    }
  errors_.push_back({c, code, 1});
}

void Metrics::setStraggler(const StragglerStats& s) {
  std::lock_guard<std::mutex> lk(mu_);
  straggler_ = s;
  hasStraggler_ = true;
}

std::string Metrics::labels() const {
  return "comm=\"" + escape(commId_) + "\",rank=\"" + std::to_string(rank_) + "\"";
}

std::string Metrics::render(const std::vector<const Metrics*>& comms) {
  // Copy every communicator's state first (each under its lock), then format family by family.
  struct Copy {
    std::string labels;
    int size;
    std::vector<Series> series;
    std::vector<ErrorCount> errors;
    bool hasStraggler;
    StragglerStats straggler{1};
  };
  std::vector<Copy> copies;
  for (const Metrics* m : comms) {
    std::vector<Series> series;
    // A sequence-lock read: the series and the communicator's counts as of one moment between
    // two folds (the counters themselves only grow meanwhile), so that no operation is seen
    // twice or not at all.
    const OpCounters& f = *m->fast_;
    for (;;) {
      const std::uint64_t v = f.fold_.load(std::memory_order_acquire);
      if (v % 2 != 0) {
        std::this_thread::yield();
        continue;
      }
      series.clear();
      for (int c = 0; c < kCollectives; ++c)
        for (int i = 0; i < kAlgorithms; ++i) {
          const Slot& x = m->slots_[c][i];
          const char* a = x.algorithm.load(std::memory_order_acquire);
          if (a == nullptr) continue;
          Series s{static_cast<Collective>(c), a};
          for (int k = 0; k <= kBuckets; ++k)
            s.buckets[k] = x.buckets[k].load(std::memory_order_relaxed);
          s.ops = x.ops.load(std::memory_order_relaxed);
          s.bytes = x.bytes.load(std::memory_order_relaxed);
          s.seconds = static_cast<double>(x.ns.load(std::memory_order_relaxed)) * 1e-9;
          if (c < static_cast<int>(OpCounters::kCollectives)) {
            const OpCounters::Entry& e = f.e_[static_cast<std::size_t>(c)];
            if (e.slot.load(std::memory_order_relaxed) == i) {
              s.ops += e.ops.load(std::memory_order_relaxed);
              s.bytes += e.bytes.load(std::memory_order_relaxed);
            }
          }
          series.push_back(s);
        }
      std::atomic_thread_fence(std::memory_order_acquire);
      if (f.fold_.load(std::memory_order_relaxed) == v) break;
    }
    std::erase_if(series, [](const Series& s) { return s.ops == 0; });
    std::lock_guard<std::mutex> lk(m->mu_);
    copies.push_back(
        {m->labels(), m->size_, std::move(series), m->errors_, m->hasStraggler_, m->straggler_});
  }
  auto opLabels = [](const Copy& c, const Series& s) {
    return c.labels + ",collective=\"" + toString(s.coll) + "\",algorithm=\"" +
           escape(s.algorithm) + "\"";
  };
  std::string out;
  family(out, "braid_operations", "counter", nullptr,
         "Operations completed, per collective and algorithm.");
  for (const Copy& c : copies)
    for (const Series& s : c.series)
      out += "braid_operations_total{" + opLabels(c, s) + "} " + std::to_string(s.ops) + "\n";
  family(out, "braid_bytes", "counter", "bytes",
         "Bytes of the completed operations (the nccl-tests size).");
  for (const Copy& c : copies)
    for (const Series& s : c.series)
      out += "braid_bytes_total{" + opLabels(c, s) + "} " + std::to_string(s.bytes) + "\n";
  family(out, "braid_operation_seconds", "histogram", "seconds",
         "Time from start to completion on this rank of the collectives with precise stamps "
         "(BRAID_STRAGGLER=N: every N-th; default with metrics: every 64th).");
  for (const Copy& c : copies)
    for (const Series& s : c.series) {
      const std::string l = opLabels(c, s);
      std::uint64_t cumulative = 0;
      for (int k = 0; k < kBuckets; ++k) {
        cumulative += s.buckets[k];
        out += "braid_operation_seconds_bucket{" + l + ",le=\"" + num(bucketBound(k)) + "\"} " +
               std::to_string(cumulative) + "\n";
      }
      cumulative += s.buckets[kBuckets];
      out += "braid_operation_seconds_bucket{" + l + ",le=\"+Inf\"} " + std::to_string(cumulative) +
             "\n";
      out += "braid_operation_seconds_count{" + l + "} " + std::to_string(cumulative) + "\n";
      out += "braid_operation_seconds_sum{" + l + "} " + num(s.seconds) + "\n";
    }
  family(out, "braid_errors", "counter", nullptr, "Failed operations, per collective and error.");
  for (const Copy& c : copies)
    for (const ErrorCount& e : c.errors)
      out += "braid_errors_total{" + c.labels + ",collective=\"" + toString(e.coll) + "\",code=\"" +
             toString(e.code) + "\"} " + std::to_string(e.n) + "\n";
  family(out, "braid_straggler_analyzed", "counter", nullptr,
         "Collectives whose last-arriving rank was determined (straggler analysis).");
  for (const Copy& c : copies)
    if (c.hasStraggler)
      out += "braid_straggler_analyzed_total{" + c.labels + "} " +
             std::to_string(c.straggler.analyzed()) + "\n";
  family(out, "braid_straggler_last", "counter", nullptr,
         "Collectives at which last_rank arrived last.");
  for (const Copy& c : copies)
    if (c.hasStraggler)
      for (int r = 0; r < c.size; ++r)
        out += "braid_straggler_last_total{" + c.labels + ",last_rank=\"" + std::to_string(r) +
               "\"} " + std::to_string(c.straggler.timesLast(r)) + "\n";
  family(out, "braid_straggler_rank", "gauge", nullptr,
         "The rank that arrived last most often (-1: none analyzed yet).");
  for (const Copy& c : copies)
    if (c.hasStraggler)
      out +=
          "braid_straggler_rank{" + c.labels + "} " + std::to_string(c.straggler.topRank()) + "\n";
  family(out, "braid_straggler_lateness_seconds", "gauge", "seconds",
         "Mean lateness of the straggler rank: the median other rank's wait minus its own.");
  for (const Copy& c : copies)
    if (c.hasStraggler) {
      const int top = c.straggler.topRank();
      out += "braid_straggler_lateness_seconds{" + c.labels + "} " +
             num(top < 0 ? 0.0 : static_cast<double>(c.straggler.meanLateNs(top)) * 1e-9) + "\n";
    }
  family(out, "braid_peer_wait_seconds", "counter", "seconds",
         "Time waiting_rank spent waiting for the rank that arrived last (analyzed collectives).");
  for (const Copy& c : copies)
    if (c.hasStraggler)
      for (int r = 0; r < c.size; ++r)
        out += "braid_peer_wait_seconds_total{" + c.labels + ",waiting_rank=\"" +
               std::to_string(r) + "\"} " +
               num(static_cast<double>(c.straggler.peerWaitNs(r)) * 1e-9) + "\n";
  out += "# EOF\n";
  return out;
}

bool writeMetricsFile(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!fd) return false;
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd.get(), text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      fd.reset();
      ::unlink(tmp.c_str());
      return false;
    }
    done += static_cast<std::size_t>(n);
  }
  if (fd.close() != 0 || ::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    return false;
  }
  return true;
}

// ---- the process's HTTP server -------------------------------------------------------------

namespace {

struct Registry {
  std::mutex mu;
  std::vector<const Metrics*> comms;
  Fd listen;
  Fd stopRead, stopWrite;  // a pipe: a byte written stops serveLoop
  int port = -1;
  std::thread thread;
};

// Never destroyed: communicators may outlive static destruction order.
Registry& registry() {
  static Registry* r = new Registry;
  return *r;
}

void sendAll(int fd, const std::string& s) {
  std::size_t done = 0;
  while (done < s.size()) {
    const ssize_t n = ::send(fd, s.data() + done, s.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<std::size_t>(n);
  }
}

void answer(int fd) {
  // Read the request head (bounded: 8 KiB, 2 s); only the request line matters.
  std::string req;
  char buf[1024];
  while (req.find("\r\n\r\n") == std::string::npos && req.size() < 8192) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 2000) <= 0) return;
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return;
    req.append(buf, static_cast<std::size_t>(n));
  }
  const std::string line = req.substr(0, req.find("\r\n"));
  std::string status = "200 OK",
              type = "application/openmetrics-text; version=1.0.0; charset=utf-8", body;
  const bool get = line.starts_with("GET "), head = line.starts_with("HEAD ");
  const std::size_t sp = line.find(' ', get ? 4 : 5);
  const std::string target = (get || head) && sp != std::string::npos
                                 ? line.substr(get ? 4 : 5, sp - (get ? 4 : 5))
                                 : std::string();
  if (!get && !head) {
    status = "405 Method Not Allowed";
    type = "text/plain";
    body = "only GET /metrics\n";
  } else if (target != "/metrics" && !target.starts_with("/metrics?")) {
    status = "404 Not Found";
    type = "text/plain";
    body = "braid serves GET /metrics\n";
  } else {
    std::lock_guard<std::mutex> lk(registry().mu);
    body = Metrics::render(registry().comms);
  }
  std::string head_ = "HTTP/1.1 " + status + "\r\nContent-Type: " + type +
                      "\r\nContent-Length: " + std::to_string(body.size()) +
                      "\r\nConnection: close\r\n\r\n";
  sendAll(fd, head ? head_ : head_ + body);
}

void serveLoop(int listenFd, int stopFd) {
  for (;;) {
    pollfd p[2] = {{listenFd, POLLIN, 0}, {stopFd, POLLIN, 0}};
    if (::poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (p[1].revents != 0) return;
    if ((p[0].revents & POLLIN) == 0) continue;
    const Fd fd(::accept4(listenFd, nullptr, nullptr, SOCK_CLOEXEC));
    if (!fd) continue;
    answer(fd.get());
    ::shutdown(fd.get(), SHUT_WR);
  }
}

}  // namespace

void MetricsServer::add(const Metrics* m) {
  std::lock_guard<std::mutex> lk(registry().mu);
  registry().comms.push_back(m);
}

void MetricsServer::remove(const Metrics* m) {
  Registry& r = registry();
  std::thread stopped;
  Fd fds[3];
  {
    std::lock_guard<std::mutex> lk(r.mu);
    r.comms.erase(std::remove(r.comms.begin(), r.comms.end(), m), r.comms.end());
    if (!r.comms.empty() || !r.thread.joinable()) return;
    // The last communicator left: the server stops (the next one with a port starts it again).
    const char x = 0;
    (void)!::write(r.stopWrite.get(), &x, 1);
    stopped = std::move(r.thread);
    fds[0] = std::move(r.listen);  // closed once the thread that polls them has stopped
    fds[1] = std::move(r.stopRead);
    fds[2] = std::move(r.stopWrite);
    r.port = -1;
  }
  stopped.join();
}

int MetricsServer::serve(const std::string& address, int port, std::string* error) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lk(r.mu);
  if (r.thread.joinable()) return r.port;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV | AI_PASSIVE;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  if (const int rc = ::getaddrinfo(address.c_str(), service.c_str(), &hints, &res); rc != 0) {
    *error = "BRAID_METRICS_ADDR '" + address + "' is not a numeric address: " + gai_strerror(rc);
    return -1;
  }
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> guard(res, ::freeaddrinfo);
  Fd listenFd(::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  const int fd = listenFd.get();
  const int one = 1;
  if (fd < 0 || ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
      ::bind(fd, res->ai_addr, res->ai_addrlen) != 0 || ::listen(fd, 16) != 0) {
    *error = "cannot listen on " + address + " port " + service + ": " + std::strerror(errno);
    return -1;
  }
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
  const int boundPort = bound.ss_family == AF_INET6
                            ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                            : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  int stopPipe[2];
  if (::pipe2(stopPipe, O_CLOEXEC) != 0) {
    *error = std::string("pipe2: ") + std::strerror(errno);
    return -1;
  }
  r.stopRead.reset(stopPipe[0]);
  r.stopWrite.reset(stopPipe[1]);
  r.listen = std::move(listenFd);
  r.port = boundPort;
  r.thread = std::thread(serveLoop, fd, r.stopRead.get());
  return boundPort;
}

// ---- the communicator's thread ---------------------------------------------------------------

MetricsThread::MetricsThread(std::chrono::milliseconds interval, std::function<void()> tick)
    : interval_(interval), tick_(std::move(tick)) {
  thread_ = std::thread([this] {
    std::unique_lock<std::mutex> lk(mu_);
    for (;;) {
      if (cv_.wait_for(lk, interval_, [this] { return stopping_; })) return;
      lk.unlock();
      tick_();
      lk.lock();
    }
  });
}

MetricsThread::~MetricsThread() {
  stop();
}

void MetricsThread::stop() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

}  // namespace braid::core
