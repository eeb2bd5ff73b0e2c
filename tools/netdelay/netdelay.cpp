// braid-netdelay: a fixed one-way delay between emulated hosts without the netem qdisc.
//
//   braid-netdelay --delay D [--ifname emu0] [--parent-pid PID] [--realtime]
//                  NETNS=ADDR[,ADDR...] ...
//
// Test and benchmark infrastructure for scripts/emucluster.sh (docs/topology.md, "Emulated
// cluster"), not a braid tool: it does not link braid and uses only the standard library and
// Linux. Each emulated host is a network namespace whose link is a persistent TUN device
// (created by the script: `ip -n NETNS tuntap add dev emu0 mode tun`). The forwarder runs in
// the caller's namespace; for each host it enters the namespace (setns on /run/netns/NETNS),
// attaches to that TUN device (TUNSETIFF, IFF_TUN | IFF_NO_PI) and returns. Then one thread:
//
//   epoll over every TUN, a timerfd and a signalfd;
//   a packet read from host a's TUN is IP (v4 or v6); its destination address names host b;
//   it is queued with due time = receive time + D and written to host b's TUN at that time.
//
// Every packet gets the same D and the clock is monotonic, so arrival order is due order: the
// timer queue is a FIFO (overall, hence per link: TCP sees no reordering). The timerfd is armed
// at the head's due time with a timer slack of 1 ns (prctl), so the hold is D plus the wake-up
// latency, tens of microseconds on an idle core; the summary reports the measured lateness.
// A packet to an address of no host (broadcast, multicast, IPv6 neighbour discovery, ...) is
// dropped and counted. --realtime runs the thread under SCHED_FIFO (priority 1): it is the
// emulated wire, and on a machine whose cores the ranks keep busy a normal thread wakes late
// (measured on 2 shared cores, 4 ranks: mean lateness 30-500 us, max several ms); the kernel's
// real-time throttling still leaves the others their share if it ever spins. SIGTERM/SIGINT (or the
// death of --parent-pid, through PR_SET_PDEATHSIG) end it: one summary line on stdout, exit 0.
// Usage errors exit 2, setup errors 1.
#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <sched.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace {

constexpr std::size_t kMaxPacket = 65536;        // the TUN MTU is at most 65535
constexpr std::size_t kQueueLimit = 256u << 20;  // bytes held at once; beyond: dropped
constexpr int kReadBurst = 16;  // packets read from one TUN before delivering what is due

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
struct SetupError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::string errnoText(const std::string& what) {
  return what + ": " + std::strerror(errno);
}

class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }
  int get() const { return fd_; }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

// An address of a host, v4 or v6, as the bytes of the IP header's destination field.
struct Address {
  int family = 0;
  std::array<std::uint8_t, 16> bytes{};
  bool operator==(const Address&) const = default;
};

struct Host {
  std::string netns;  // as given: a name under /run/netns, or a path
  std::vector<Address> addresses;
  Fd tun;
  std::uint64_t packetsIn = 0, packetsOut = 0;
};

struct Args {
  std::int64_t delayNs = -1;
  std::string delayText;
  std::string ifname = "emu0";
  long parentPid = 0;
  bool realtime = false;
  std::vector<Host> hosts;
};

// "1ms", "250us", "1.5ms", "0.002s", "800ns", "0": a unit is required unless the value is 0
// (tc reads a bare number as microseconds, netem users as milliseconds: no guessing).
std::int64_t parseDuration(std::string_view text) {
  const std::string bad = "--delay: expected a duration such as 1ms, 250us, 0.5ms or 0, got '" +
                          std::string(text) + "'";
  double value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || value < 0) throw UsageError(bad);
  std::string_view unit(end, text.data() + text.size() - end);
  double scale = 0;
  if (unit == "ns")
    scale = 1;
  else if (unit == "us")
    scale = 1e3;
  else if (unit == "ms")
    scale = 1e6;
  else if (unit == "s")
    scale = 1e9;
  else if (unit.empty() && value == 0)
    scale = 0;
  else
    throw UsageError(bad);
  const double ns = value * scale;
  if (ns > 60e9) throw UsageError("--delay: at most 60s, got '" + std::string(text) + "'");
  return static_cast<std::int64_t>(ns + 0.5);
}

Address parseAddress(const std::string& text, const std::string& arg) {
  Address a;
  if (::inet_pton(AF_INET, text.c_str(), a.bytes.data()) == 1) {
    a.family = AF_INET;
  } else if (::inet_pton(AF_INET6, text.c_str(), a.bytes.data()) == 1) {
    a.family = AF_INET6;
  } else {
    throw UsageError("host '" + arg + "': '" + text +
                     "' is not an IPv4 or IPv6 address (expected NETNS=ADDR[,ADDR...])");
  }
  return a;
}

void usage(std::FILE* out) {
  std::fputs(
      "usage: braid-netdelay --delay D [--ifname NAME] [--parent-pid PID] [--realtime]\n"
      "                      NETNS=ADDR[,ADDR...] ...\n"
      "Forwards IP packets between the TUN devices NAME (default emu0) of the network namespaces\n"
      "NETNS (names under /run/netns, or paths), each packet to the namespace owning its\n"
      "destination address, D (1ms, 250us, 0) after it was read. Prints\n"
      "'braid-netdelay: ready ...' once attached and a summary on SIGTERM/SIGINT.\n"
      "--parent-pid PID: exit (with the summary) when process PID, the caller, exits.\n"
      "--realtime: run under SCHED_FIFO priority 1 (wakes on time on busy cores); if that is\n"
      "not permitted, say so on the ready line and run as a normal thread.\n",
      out);
}

Args parseArgs(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](const char* name) -> std::string {
      if (i + 1 >= argc) throw UsageError(std::string(name) + ": missing value");
      return argv[++i];
    };
    if (a == "-h" || a == "--help") {
      usage(stdout);
      std::exit(0);
    } else if (a == "--delay") {
      args.delayText = value("--delay");
      args.delayNs = parseDuration(args.delayText);
    } else if (a == "--ifname") {
      args.ifname = value("--ifname");
      if (args.ifname.empty() || args.ifname.size() >= IFNAMSIZ)
        throw UsageError("--ifname: '" + args.ifname + "' is not an interface name (1-15 chars)");
    } else if (a == "--realtime") {
      args.realtime = true;
    } else if (a == "--parent-pid") {
      std::string v = value("--parent-pid");
      long pid = 0;
      auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), pid);
      if (ec != std::errc() || end != v.data() + v.size() || pid <= 0)
        throw UsageError("--parent-pid: expected a process id, got '" + v + "'");
      args.parentPid = pid;
    } else if (a.starts_with("-")) {
      throw UsageError("unknown option '" + a + "'");
    } else {
      auto eq = a.find('=');
      if (eq == std::string::npos || eq == 0 || eq + 1 == a.size())
        throw UsageError("host '" + a + "': expected NETNS=ADDR[,ADDR...]");
      Host h;
      h.netns = a.substr(0, eq);
      std::string rest = a.substr(eq + 1);
      std::size_t pos = 0;
      while (pos <= rest.size()) {
        auto comma = rest.find(',', pos);
        if (comma == std::string::npos) comma = rest.size();
        h.addresses.push_back(parseAddress(rest.substr(pos, comma - pos), a));
        pos = comma + 1;
      }
      args.hosts.push_back(std::move(h));
    }
  }
  if (args.delayNs < 0) throw UsageError("--delay: missing (e.g. --delay 1ms)");
  if (args.hosts.empty()) throw UsageError("NETNS=ADDR: no host given");
  std::vector<std::pair<Address, const Host*>> seen;
  for (const auto& h : args.hosts)
    for (const auto& x : h.addresses) {
      for (const auto& [y, owner] : seen)
        if (x == y) {
          char text[INET6_ADDRSTRLEN] = {};
          ::inet_ntop(x.family, x.bytes.data(), text, sizeof text);
          throw UsageError(std::string("address ") + text + " is given twice (hosts '" +
                           owner->netns + "' and '" + h.netns + "')");
        }
      seen.emplace_back(x, &h);
    }
  return args;
}

// Attaches to the persistent TUN device IFNAME inside namespace NETNS; the calling thread (the
// only one) returns to the namespace it came from before this returns or throws.
Fd attachTun(const std::string& netns, const std::string& ifname, int homeNs) {
  std::string path = netns.find('/') != std::string::npos ? netns : "/run/netns/" + netns;
  Fd nsFd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (nsFd.get() < 0 && netns.find('/') == std::string::npos) {
    int firstErr = errno;
    nsFd = Fd(::open(("/var/run/netns/" + netns).c_str(), O_RDONLY | O_CLOEXEC));
    if (nsFd.get() < 0) errno = firstErr;  // report the first path tried
  }
  if (nsFd.get() < 0) throw SetupError(errnoText("host '" + netns + "': cannot open " + path));
  if (::setns(nsFd.get(), CLONE_NEWNET) != 0)
    throw SetupError(errnoText("host '" + netns + "': setns into " + path));
  Fd tun(::open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC));
  int err = errno;
  std::string failure;
  if (tun.get() < 0) {
    failure = std::string("open /dev/net/tun: ") + std::strerror(err);
  } else {
    ifreq ifr{};
    ifr.ifr_flags = IFF_TUN | IFF_NO_PI;
    std::memcpy(ifr.ifr_name, ifname.data(), ifname.size());
    if (::ioctl(tun.get(), TUNSETIFF, &ifr) != 0)
      failure = "TUNSETIFF on " + ifname + ": " + std::strerror(errno) +
                " (is it a TUN device created with 'ip tuntap add dev " + ifname +
                " mode tun', and not attached by another process?)";
  }
  if (::setns(homeNs, CLONE_NEWNET) != 0)
    throw SetupError(errnoText("cannot return to the original network namespace"));
  if (!failure.empty()) throw SetupError("host '" + netns + "': " + failure);
  return tun;
}

std::int64_t nowNs() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

struct Pending {
  std::int64_t due;
  std::size_t to;
  std::vector<std::uint8_t> data;
};

struct Stats {
  std::uint64_t packets = 0, bytes = 0;
  std::uint64_t unknownDest = 0, notIp = 0, queueFull = 0, writeFailed = 0;
  std::int64_t lateSumNs = 0, lateMaxNs = 0;
  std::uint64_t dropped() const { return unknownDest + notIp + queueFull + writeFailed; }
};

class Forwarder {
 public:
  Forwarder(Args args) : args_(std::move(args)) {}

  void attach() {
    Fd home(::open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC));
    if (home.get() < 0) throw SetupError(errnoText("open /proc/self/ns/net"));
    for (auto& h : args_.hosts) h.tun = attachTun(h.netns, args_.ifname, home.get());
  }

  // Runs until SIGTERM/SIGINT/SIGHUP; returns the summary line.
  std::string run() {
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGHUP);
    signalFd_ = Fd(::signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC));
    timerFd_ = Fd(::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));
    epoll_ = Fd(::epoll_create1(EPOLL_CLOEXEC));
    if (signalFd_.get() < 0 || timerFd_.get() < 0 || epoll_.get() < 0)
      throw SetupError(errnoText("signalfd/timerfd/epoll"));
    watch(signalFd_.get(), kSignalTag);
    watch(timerFd_.get(), kTimerTag);
    for (std::size_t i = 0; i < args_.hosts.size(); ++i) watch(args_.hosts[i].tun.get(), i);

    std::vector<std::uint8_t> buf(kMaxPacket);
    std::array<epoll_event, 64> events{};
    bool stop = false;
    while (!stop) {
      int n = ::epoll_wait(epoll_.get(), events.data(), static_cast<int>(events.size()), -1);
      if (n < 0) {
        if (errno == EINTR) continue;
        throw SetupError(errnoText("epoll_wait"));
      }
      for (int e = 0; e < n; ++e) {
        std::uint64_t tag = events[e].data.u64;
        if (tag == kSignalTag) {
          stop = true;
        } else if (tag == kTimerTag) {
          std::uint64_t expirations;
          [[maybe_unused]] auto r = ::read(timerFd_.get(), &expirations, sizeof expirations);
        } else {
          readFrom(tag, buf);
          deliverDue();  // between hosts' bursts too: what is due leaves before more comes in
        }
      }
      deliverDue();
      armTimer();
    }
    return summary();
  }

 private:
  static constexpr std::uint64_t kSignalTag = ~0ull;
  static constexpr std::uint64_t kTimerTag = ~0ull - 1;

  void watch(int fd, std::uint64_t tag) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = tag;
    if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev) != 0)
      throw SetupError(errnoText("epoll_ctl"));
  }

  // Which host owns the packet's destination address; hosts.size() when none does.
  std::size_t destination(const std::uint8_t* p, std::size_t len) const {
    Address a;
    if (len >= 20 && (p[0] >> 4) == 4) {
      a.family = AF_INET;
      std::memcpy(a.bytes.data(), p + 16, 4);
    } else if (len >= 40 && (p[0] >> 4) == 6) {
      a.family = AF_INET6;
      std::memcpy(a.bytes.data(), p + 24, 16);
    } else {
      return args_.hosts.size() + 1;
    }
    for (std::size_t i = 0; i < args_.hosts.size(); ++i)
      for (const auto& x : args_.hosts[i].addresses)
        if (x == a) return i;
    return args_.hosts.size();
  }

  void readFrom(std::size_t from, std::vector<std::uint8_t>& buf) {
    Host& h = args_.hosts[from];
    for (int k = 0; k < kReadBurst; ++k) {
      ssize_t len = ::read(h.tun.get(), buf.data(), buf.size());
      if (len < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return;
        throw SetupError(errnoText("host '" + h.netns + "': read from " + args_.ifname));
      }
      const std::int64_t now = nowNs();
      ++h.packetsIn;
      auto n = static_cast<std::size_t>(len);
      std::size_t to = destination(buf.data(), n);
      if (to > args_.hosts.size()) {
        ++stats_.notIp;
        continue;
      }
      if (to == args_.hosts.size()) {
        ++stats_.unknownDest;
        continue;
      }
      if (queuedBytes_ + n > kQueueLimit) {
        ++stats_.queueFull;
        continue;
      }
      // max(): due times never decrease, so the queue stays a FIFO even if the clock stalls.
      std::int64_t due = now + args_.delayNs;
      if (!queue_.empty() && queue_.back().due > due) due = queue_.back().due;
      queue_.push_back(Pending{due, to, std::vector<std::uint8_t>(buf.begin(), buf.begin() + len)});
      queuedBytes_ += n;
    }
  }

  void deliverDue() {
    if (queue_.empty()) return;
    std::int64_t now = nowNs();
    while (!queue_.empty() && queue_.front().due <= now) {
      Pending& p = queue_.front();
      Host& h = args_.hosts[p.to];
      ssize_t w = ::write(h.tun.get(), p.data.data(), p.data.size());
      if (w == static_cast<ssize_t>(p.data.size())) {
        ++stats_.packets;
        stats_.bytes += p.data.size();
        ++h.packetsOut;
        std::int64_t late = now - p.due;
        stats_.lateSumNs += late;
        if (late > stats_.lateMaxNs) stats_.lateMaxNs = late;
      } else {
        ++stats_.writeFailed;
      }
      queuedBytes_ -= p.data.size();
      queue_.pop_front();
      if (queue_.empty() || queue_.front().due > now) now = nowNs();
    }
  }

  void armTimer() {
    itimerspec spec{};  // all zero: disarmed
    if (!queue_.empty()) {
      std::int64_t due = queue_.front().due;
      spec.it_value.tv_sec = due / 1'000'000'000;
      spec.it_value.tv_nsec = due % 1'000'000'000;
      if (spec.it_value.tv_sec == 0 && spec.it_value.tv_nsec == 0) spec.it_value.tv_nsec = 1;
    }
    if (::timerfd_settime(timerFd_.get(), TFD_TIMER_ABSTIME, &spec, nullptr) != 0)
      throw SetupError(errnoText("timerfd_settime"));
  }

  std::string summary() const {
    char line[512];
    double meanLateUs =
        stats_.packets ? static_cast<double>(stats_.lateSumNs) / 1e3 / stats_.packets : 0.0;
    std::snprintf(line, sizeof line,
                  "braid-netdelay: delay %s: forwarded %llu packets, %llu bytes; dropped %llu "
                  "(unknown destination %llu, not IP %llu, queue full %llu, write failed %llu); "
                  "queued at exit %zu; lateness after the delay: mean %.1f us, max %.1f us",
                  args_.delayText.c_str(), static_cast<unsigned long long>(stats_.packets),
                  static_cast<unsigned long long>(stats_.bytes),
                  static_cast<unsigned long long>(stats_.dropped()),
                  static_cast<unsigned long long>(stats_.unknownDest),
                  static_cast<unsigned long long>(stats_.notIp),
                  static_cast<unsigned long long>(stats_.queueFull),
                  static_cast<unsigned long long>(stats_.writeFailed), queue_.size(), meanLateUs,
                  static_cast<double>(stats_.lateMaxNs) / 1e3);
    return line;
  }

  Args args_;
  Fd signalFd_, timerFd_, epoll_;
  std::deque<Pending> queue_;
  std::size_t queuedBytes_ = 0;
  Stats stats_;
};

}  // namespace

int main(int argc, char** argv) {
  Args args;
  try {
    args = parseArgs(argc, argv);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "braid-netdelay: %s\n(braid-netdelay --help shows the usage)\n", e.what());
    return 2;
  }
  // Block the stop signals before anything else: they are read from a signalfd, and one that
  // arrives during setup stays pending instead of killing the process without a summary.
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGTERM);
  sigaddset(&mask, SIGINT);
  sigaddset(&mask, SIGHUP);
  ::sigprocmask(SIG_BLOCK, &mask, nullptr);
  if (args.parentPid != 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != args.parentPid) {
      std::fprintf(stderr, "braid-netdelay: --parent-pid %ld is not running (parent is %ld)\n",
                   args.parentPid, static_cast<long>(::getppid()));
      return 1;
    }
  }
  ::prctl(PR_SET_TIMERSLACK, 1UL);  // hrtimer expiry as exact as the scheduler allows
  std::string sched = "normal scheduling";
  if (args.realtime) {
    sched_param sp{};
    sp.sched_priority = 1;
    if (::sched_setscheduler(0, SCHED_FIFO, &sp) == 0)
      sched = "SCHED_FIFO 1";
    else
      sched = std::string("normal scheduling (SCHED_FIFO: ") + std::strerror(errno) + ")";
  }
  std::string ifname = args.ifname;
  std::size_t hosts = args.hosts.size();
  std::string delay = args.delayText;
  try {
    Forwarder fwd(std::move(args));
    fwd.attach();
    std::printf("braid-netdelay: ready: %zu hosts (%s), delay %s, %s\n", hosts, ifname.c_str(),
                delay.c_str(), sched.c_str());
    std::fflush(stdout);
    std::string line = fwd.run();
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "braid-netdelay: %s\n", e.what());
    return 1;
  }
  return 0;
}
