// braid-check: is this job able to run collectives? The connectivity checker, in the spirit of
// hccl_test and nccl-tests' sanity runs, but naming what is wrong.
//
// Every rank runs the same five stages; each rank posts its results of a stage to the job's store
// (board.hpp) and reads everyone's, so all ranks agree on what passed, continue or stop together,
// and exit with the same status, even when the communicator under test failed or a rank vanished.
// Rank 0 prints the report (and writes --json). A rank that cannot even reach the store says so
// itself and exits 3; the others then report it as a rank that did not join.
#include <unistd.h>

#include <braid/braid.hpp>
#include <braid/launch.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "board.hpp"
#include "check_args.hpp"
#include "collective_checks.hpp"
#include "common/text.hpp"
#include "pair_schedule.hpp"
#include "probes.hpp"
#include "report.hpp"

namespace braid::check {
namespace {

constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;
constexpr int kExitStore = 3;
constexpr int kExitIncomplete = 4;

// Send/recv tags of the probes (the same on both ranks of a pair).
constexpr std::uint32_t kTagConnect = 0xc0;
constexpr std::uint32_t kTagLatency = 0xc1;
constexpr std::uint32_t kTagBandwidth = 0xc2;
constexpr std::size_t kConnectProbeBytes = 64;

using Ms = std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

std::string hostName() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "?";
  return buf;
}

std::string hostPort(const std::string& host, unsigned port) {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

std::string seconds(Ms t) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g s", static_cast<double>(t.count()) / 1000.0);
  return buf;
}

std::string fixed(double v, int precision) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", precision, v);
  return buf;
}

double toDouble(const std::string& s) {
  try {
    return std::stod(s);
  } catch (const std::exception&) {
    return -1;
  }
}

long long toInt(const std::string& s) {
  try {
    return std::stoll(s);
  } catch (const std::exception&) {
    return 0;
  }
}

/// "1 pair", "3 pairs".
std::string counted(std::size_t n, const std::string& noun) {
  return std::to_string(n) + " " + noun + (n == 1 ? "" : "s");
}

/// "rank 3 (10.0.0.2:4100)" -> "10.0.0.2:4100"; "rank 1 (pid 7 on vm)" -> "pid 7 on vm".
std::string endpointOf(const std::string& description) {
  const std::size_t open = description.find('(');
  const std::size_t close = description.rfind(')');
  if (open == std::string::npos || close == std::string::npos || close < open) return description;
  return description.substr(open + 1, close - open - 1);
}

class Checker {
 public:
  Checker(const CheckArgs& args, const LaunchInfo& launch, const Options& options);
  int run();

 private:
  bool checkStore();
  bool checkRanks();
  bool checkPairs();
  bool checkPerformance();
  bool checkCollectives();
  int finish();

  /// Rank 0 prints the report; every line is flushed so a hang is visible where it happens.
  void say(const std::string& line) const;
  /// stdout, or stderr when the JSON goes to stdout (--json -), so stdout stays parseable.
  std::FILE* reportFile() const { return args_.jsonPath == "-" ? stderr : stdout; }
  /// A failure this rank saw itself: rank 0 reports it, the others print it on stderr too.
  void localFailure(const std::string& what) const;
  void stage(const std::string& name, Status status, const std::string& detail);
  void fail(const std::string& what);
  /// "rank 2 (host, address[; extra])".
  std::string rankText(int r, const std::string& extra = "") const;
  /// Ranks that joined and reported every stage since: the ones later stages wait for.
  std::vector<bool> reporting() const;
  /// Marks ranks that did not post `stage` and returns whether any is missing.
  bool noteMissing(const std::vector<std::optional<std::string>>& posts, const std::string& what);

  CheckArgs args_;
  LaunchInfo launch_;
  Options options_;
  Ms waitTimeout_;  // connecting, and waiting for another rank's results
  Ms opTimeout_;    // one operation
  int rank_;
  int size_;
  std::string storeAddress_;
  std::shared_ptr<TcpStoreServer> server_;
  std::shared_ptr<TcpStore> store_;
  std::unique_ptr<Board> board_;
  std::unique_ptr<Comm> comm_;
  CheckReport report_;
  bool incomplete_ = false;
  std::vector<bool> silent_;  // by rank: missed a stage's report, so nobody waits for it again
};

Checker::Checker(const CheckArgs& args, const LaunchInfo& launch, const Options& options)
    : args_(args),
      launch_(launch),
      options_(options),
      waitTimeout_(args.timeout.value_or(options.connectTimeout)),
      opTimeout_(args.timeout.value_or(options.execTimeout)),
      rank_(launch.rank),
      size_(launch.size) {
  options_.connectTimeout = waitTimeout_;
  options_.execTimeout = opTimeout_;
  options_.stragglerSample = 1;  // stage 5 says which rank arrived last
  report_.version = braid::version();
  report_.launch = launch.source;
  report_.nranks = size_;
  report_.timeoutS = static_cast<double>(waitTimeout_.count()) / 1000.0;
  report_.latencyBytes = args.latencyBytes;
  report_.bandwidthBytes = args.bandwidthBytes;
  report_.collectiveBytes = args.collectiveBytes;
  report_.latencyIters = args.latencyIters;
  report_.bandwidthIters = args.bandwidthIters;
  report_.ranks.resize(static_cast<std::size_t>(size_));
  silent_.assign(static_cast<std::size_t>(size_), false);
}

void Checker::say(const std::string& line) const {
  if (rank_ != 0) return;
  std::FILE* out = reportFile();
  std::fputs((line + "\n").c_str(), out);
  std::fflush(out);
}

void Checker::localFailure(const std::string& what) const {
  if (rank_ == 0) return;
  std::fprintf(stderr, "braid-check: rank %d: FAIL %s\n", rank_, what.c_str());
  std::fflush(stderr);
}

void Checker::stage(const std::string& name, Status status, const std::string& detail) {
  report_.stages.push_back({name, status, detail});
}

void Checker::fail(const std::string& what) {
  report_.failures.push_back(what);
}

std::string Checker::rankText(int r, const std::string& extra) const {
  const RankInfo& k = report_.ranks[static_cast<std::size_t>(r)];
  std::string inside = k.joined ? k.host + ", " + k.address : "";
  if (!extra.empty()) inside += (inside.empty() ? "" : "; ") + extra;
  return "rank " + std::to_string(r) + (inside.empty() ? "" : " (" + inside + ")");
}

std::vector<bool> Checker::reporting() const {
  std::vector<bool> v;
  for (int r = 0; r < size_; ++r)
    v.push_back(report_.ranks[static_cast<std::size_t>(r)].joined &&
                !silent_[static_cast<std::size_t>(r)]);
  return v;
}

bool Checker::noteMissing(const std::vector<std::optional<std::string>>& posts,
                          const std::string& what) {
  bool any = false;
  for (int r = 0; r < size_; ++r) {
    if (posts[static_cast<std::size_t>(r)]) continue;
    any = true;
    if (!report_.ranks[static_cast<std::size_t>(r)].joined || silent_[static_cast<std::size_t>(r)])
      continue;
    silent_[static_cast<std::size_t>(r)] = true;
    const std::string text = "rank " + std::to_string(r) + " did not report " + what +
                             " within the timeout (it hung or exited; see its own output)";
    fail(text);
    say("  FAIL " + text);
  }
  if (any) incomplete_ = true;
  return any;
}

// ---------------------------------------------------------------- 1: store

bool Checker::checkStore() {
  say("[1/5] store");
  std::uint16_t port = launch_.storePort;
  storeAddress_ = hostPort(launch_.storeHost, port);
  try {
    if (launch_.storeSource == "pmix" || launch_.storeSource == "slurm") {
      // The launcher gave the address (derived under Slurm, exchanged through PMIx under
      // mpirun: a collective, every rank takes part), as Comm::create has it.
      server_ = serveLaunchStore(launch_, options_);
      port = launch_.storePort;
      storeAddress_ = hostPort(launch_.storeHost, port);
    } else if (rank_ == 0 && (!launch_.storeExternal || (size_ == 1 && port == 0))) {
      server_ = std::make_shared<TcpStoreServer>(launch_.storeHost, port, options_.security);
      port = server_->port();
      storeAddress_ = hostPort(launch_.storeHost, port);
    }
  } catch (const std::exception& e) {
    const std::string what =
        "rank 0 cannot serve the store at " + storeAddress_ + ": " + std::string(e.what());
    fail(what);
    say("  FAIL " + what);
    stage("store", Status::Fail, what);
    report_.store = storeAddress_;
    report_.exitCode = kExitStore;
    return false;
  }
  report_.store = storeAddress_;
  const auto t0 = Clock::now();
  try {
    store_ = std::make_shared<TcpStore>(launch_.storeHost, port, waitTimeout_, waitTimeout_,
                                        options_.security);
  } catch (const std::exception& e) {
    const std::string what = "rank " + std::to_string(rank_) + " cannot reach the store at " +
                             storeAddress_ + " within " + seconds(waitTimeout_) + ": " + e.what();
    fail(what);
    say("  FAIL " + what);
    localFailure(what);
    stage("store", Status::Fail, what);
    report_.exitCode = kExitStore;
    return false;
  }
  try {
    checkLaunchStoreJob(*store_, launch_, options_);
  } catch (const std::exception& e) {
    const std::string what = e.what();
    fail(what);
    say("  FAIL " + what);
    localFailure(what);
    stage("store", Status::Fail, what);
    report_.exitCode = kExitStore;
    return false;
  }
  report_.ranks[static_cast<std::size_t>(rank_)].storeConnectMs =
      std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  const std::int64_t gen = store_->add("braid-check/generation/" + std::to_string(rank_), 1) - 1;
  board_ =
      std::make_unique<Board>(*store_, "braid-check/" + std::to_string(gen) + "/", rank_, size_);
  say("  PASS rank 0 reached the store at " + storeAddress_ +
      (server_ ? " (served by rank 0)" : "") + " in " + fixed(report_.ranks[0].storeConnectMs, 1) +
      " ms");
  stage("store", Status::Pass, storeAddress_);
  return true;
}

// ---------------------------------------------------------------- 2: ranks

bool Checker::checkRanks() {
  say("[2/5] ranks (each rank publishes its host and address through the store)");
  std::string address =
      options_.listenAddress.empty() ? store_->localAddress() : options_.listenAddress;
  board_->post("join", field(hostName()) + "\t" + field(address) + "\t" +
                           std::to_string(::getpid()) + "\t" + field(launch_.source) + "\t" +
                           fixed(report_.ranks[static_cast<std::size_t>(rank_)].storeConnectMs, 3));
  const auto posts = board_->collect("join", waitTimeout_, waitTimeout_);
  int count = 0;
  for (int r = 0; r < size_; ++r) {
    const auto& post = posts[static_cast<std::size_t>(r)];
    RankInfo& k = report_.ranks[static_cast<std::size_t>(r)];
    if (!post) continue;
    const auto f = splitFields(*post);
    if (f.size() < 5) continue;
    k.joined = true;
    k.host = f[0];
    k.address = f[1];
    k.pid = toInt(f[2]);
    k.launch = f[3];
    k.storeConnectMs = toDouble(f[4]);
    ++count;
    say("  rank " + std::to_string(r) + "  host " + k.host + "  address " + k.address + "  pid " +
        std::to_string(k.pid) + "  store connect " + fixed(k.storeConnectMs, 1) + " ms");
  }
  if (count == size_) {
    say("  PASS " + std::to_string(count) + " of " + std::to_string(size_) + " ranks joined");
    stage("ranks", Status::Pass, std::to_string(count) + " of " + std::to_string(size_));
    return true;
  }
  for (int r = 0; r < size_; ++r) {
    if (report_.ranks[static_cast<std::size_t>(r)].joined) continue;
    const std::string what = "rank " + std::to_string(r) + " did not join within " +
                             seconds(waitTimeout_) +
                             " (not started, exited, or could not reach the store " +
                             storeAddress_ + ": see that rank's own output)";
    fail(what);
    say("  FAIL " + what);
  }
  incomplete_ = true;
  stage("ranks", Status::Fail,
        std::to_string(count) + " of " + std::to_string(size_) + " joined; missing " +
            Board::missingRanks(posts));
  return false;
}

// ---------------------------------------------------------------- 3: pairs

bool Checker::checkPairs() {
  const int rounds = tournamentRounds(size_);
  say("[3/5] pairs (communicator setup, then one verified " + std::to_string(kConnectProbeBytes) +
      "-byte round trip per pair, " + counted(rounds, "round") + ")");
  std::string setupError;
  try {
    comm_ = Comm::create(store_, rank_, size_, options_);
  } catch (const std::exception& e) {
    setupError = e.what();
    localFailure("communicator setup: " + setupError);
  }
  // Per peer: status (ok, err, skip), rtt us, wrong bytes, error.
  std::vector<std::string> status(static_cast<std::size_t>(size_), "skip");
  std::vector<std::string> error(static_cast<std::size_t>(size_));
  std::vector<double> rtt(static_cast<std::size_t>(size_), -1);
  std::vector<long long> wrong(static_cast<std::size_t>(size_), 0);
  for (int round = 0; comm_ && round < rounds; ++round) {
    const int peer = tournamentPartner(size_, round, rank_);
    if (peer < 0) continue;
    try {
      const ProbeResult pr = pingPong(*comm_, peer, kConnectProbeBytes, 0, 1, kTagConnect);
      status[static_cast<std::size_t>(peer)] = "ok";
      rtt[static_cast<std::size_t>(peer)] = pr.roundTripSeconds * 1e6;
      wrong[static_cast<std::size_t>(peer)] = pr.wrongBytes;
    } catch (const std::exception& e) {
      status[static_cast<std::size_t>(peer)] = "err";
      error[static_cast<std::size_t>(peer)] = e.what();
      localFailure("pair with rank " + std::to_string(peer) + ": " + e.what());
    }
  }
  std::string post = setupError.empty() ? "setup\tok\n" : "setup\terr\t" + field(setupError) + "\n";
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    const std::string path = comm_ ? comm_->pathTo(p) : "";
    const std::string desc = comm_ ? comm_->describePeer(p) : "";
    post += std::to_string(p) + "\t" + field(path) + "\t" + field(desc) + "\t" +
            status[static_cast<std::size_t>(p)] + "\t" +
            fixed(rtt[static_cast<std::size_t>(p)], 3) + "\t" +
            std::to_string(wrong[static_cast<std::size_t>(p)]) + "\t" +
            field(error[static_cast<std::size_t>(p)]) + "\n";
  }
  board_->post("pairs", post);
  const auto posts =
      board_->collect("pairs", waitTimeout_ + opTimeout_ * (rounds + 1), waitTimeout_, reporting());
  noteMissing(posts, "its pair results");

  // What each rank said about each peer, and about its own setup.
  struct Side {
    bool present = false;
    std::string path, desc, status = "skip", error;
    double rtt = -1;
    long long wrong = 0;
  };
  std::vector<std::vector<Side>> sides(static_cast<std::size_t>(size_),
                                       std::vector<Side>(static_cast<std::size_t>(size_)));
  std::vector<std::string> setupErrors(static_cast<std::size_t>(size_));
  for (int r = 0; r < size_; ++r) {
    if (!posts[static_cast<std::size_t>(r)]) continue;
    for (const std::string& rec : splitRecords(*posts[static_cast<std::size_t>(r)])) {
      const auto f = splitFields(rec);
      if (f.size() >= 2 && f[0] == "setup") {
        if (f[1] != "ok") setupErrors[static_cast<std::size_t>(r)] = f.size() > 2 ? f[2] : "?";
        continue;
      }
      if (f.size() < 7) continue;
      const long long p = toInt(f[0]);
      if (p < 0 || p >= size_) continue;
      Side& s = sides[static_cast<std::size_t>(r)][static_cast<std::size_t>(p)];
      s.present = true;
      s.path = f[1];
      s.desc = f[2];
      s.status = f[3];
      s.rtt = toDouble(f[4]);
      s.wrong = toInt(f[5]);
      s.error = f[6];
    }
  }
  for (int r = 0; r < size_; ++r)
    if (!setupErrors[static_cast<std::size_t>(r)].empty()) {
      const std::string what =
          "rank " + std::to_string(r) +
          " could not set up its communicator: " + setupErrors[static_cast<std::size_t>(r)];
      fail(what);
      say("  FAIL " + what);
    }

  int passed = 0;
  for (int a = 0; a < size_; ++a) {
    for (int b = a + 1; b < size_; ++b) {
      const Side& ab = sides[static_cast<std::size_t>(a)][static_cast<std::size_t>(b)];
      const Side& ba = sides[static_cast<std::size_t>(b)][static_cast<std::size_t>(a)];
      PairInfo p;
      p.a = a;
      p.b = b;
      p.path = ab.present ? ab.path : ba.path;
      p.endpointB = ab.present ? endpointOf(ab.desc) : "";
      p.endpointA = ba.present ? endpointOf(ba.desc) : "";
      p.rttUs = ab.rtt;
      std::string why;
      auto addWhy = [&](const std::string& w) { why += (why.empty() ? "" : "; ") + w; };
      for (const auto& [me, s] : {std::pair<int, const Side*>{a, &ab}, {b, &ba}}) {
        if (!posts[static_cast<std::size_t>(me)]) {
          addWhy("rank " + std::to_string(me) + " did not report");
        } else if (!setupErrors[static_cast<std::size_t>(me)].empty()) {
          addWhy("rank " + std::to_string(me) + " has no communicator");
        } else if (s->status == "err") {
          addWhy("rank " + std::to_string(me) + ": " + s->error);
        } else if (s->status != "ok") {
          addWhy("rank " + std::to_string(me) + ": not run");
        } else if (s->wrong > 0) {
          addWhy("rank " + std::to_string(me) + " received " + std::to_string(s->wrong) +
                 " wrong bytes of " + std::to_string(kConnectProbeBytes));
        }
      }
      p.status = why.empty() ? Status::Pass : Status::Fail;
      p.error = why;
      // Each end as the other's transport reaches it: "at ADDRESS:PORT" (its listener) over
      // tcp, "pid N on HOST" through shared memory.
      auto via = [&](const std::string& endpoint) {
        return endpoint.empty() ? endpoint : (p.path == "tcp" ? "at " : "") + endpoint;
      };
      std::string line = std::string("  ") + toString(p.status) + " pair " + std::to_string(a) +
                         "-" + std::to_string(b) + "  " + (p.path.empty() ? "?" : p.path) + "  " +
                         rankText(a, via(p.endpointA)) + " <-> " + rankText(b, via(p.endpointB));
      if (p.status == Status::Pass) {
        ++passed;
        line += "  rtt " + fixed(p.rttUs, 1) + " us";
      } else {
        line += ": " + why;
        fail("pair " + std::to_string(a) + "-" + std::to_string(b) + " (" + rankText(a) + " <-> " +
             rankText(b) + "): " + why);
      }
      say(line);
      report_.pairs.push_back(p);
    }
  }
  const int total = size_ * (size_ - 1) / 2;
  const bool ok = passed == total && !incomplete_ &&
                  std::all_of(setupErrors.begin(), setupErrors.end(),
                              [](const std::string& e) { return e.empty(); });
  const std::string detail = std::to_string(passed) + " of " + counted(total, "pair");
  if (ok) say("  PASS " + detail + " connected");
  stage("pairs", ok ? Status::Pass : Status::Fail, detail);
  return ok;
}

// ---------------------------------------------------------------- 4: latency and bandwidth

bool Checker::checkPerformance() {
  const int rounds = tournamentRounds(size_);
  say("[4/5] latency and bandwidth (ping-pong per pair, " + counted(rounds, "round") + ": " +
      tools::formatBytes(args_.latencyBytes) + " x " + std::to_string(args_.latencyIters) + ", " +
      tools::formatBytes(args_.bandwidthBytes) + " x " + std::to_string(args_.bandwidthIters) +
      ")");
  std::string post;
  for (int round = 0; round < rounds; ++round) {
    const int peer = tournamentPartner(size_, round, rank_);
    if (peer < 0) continue;
    std::string record = std::to_string(peer);
    try {
      const ProbeResult lat =
          pingPong(*comm_, peer, args_.latencyBytes, std::max(2, args_.latencyIters / 10),
                   args_.latencyIters, kTagLatency);
      const ProbeResult bw =
          pingPong(*comm_, peer, args_.bandwidthBytes, 1, args_.bandwidthIters, kTagBandwidth);
      const double latencyUs = lat.roundTripSeconds * 0.5e6;
      const double oneWay = bw.roundTripSeconds * 0.5;
      const double gbps =
          oneWay > 0 ? static_cast<double>(args_.bandwidthBytes) / oneWay / 1e9 : -1;
      record += "\tok\t" + fixed(rank_ < peer ? latencyUs : -1, 3) + "\t" +
                fixed(rank_ < peer ? gbps : -1, 6) + "\t" +
                std::to_string(lat.wrongBytes + bw.wrongBytes) + "\t";
    } catch (const std::exception& e) {
      record += "\terr\t-1\t-1\t0\t" + field(e.what());
      localFailure("ping-pong with rank " + std::to_string(peer) + ": " + e.what());
    }
    post += record + "\n";
  }
  board_->post("perf", post.empty() ? "\n" : post);
  const auto posts = board_->collect("perf", opTimeout_ * (2 * rounds + 1),
                                     std::max(waitTimeout_, opTimeout_), reporting());
  noteMissing(posts, "its latency and bandwidth results");

  bool ok = !incomplete_;
  for (int r = 0; r < size_; ++r) {
    if (!posts[static_cast<std::size_t>(r)]) continue;
    for (const std::string& rec : splitRecords(*posts[static_cast<std::size_t>(r)])) {
      const auto f = splitFields(rec);
      if (f.size() < 6) continue;
      PairInfo* p = report_.pair(r, static_cast<int>(toInt(f[0])));
      if (p == nullptr) continue;
      std::string why;
      if (f[1] != "ok") {
        why = "rank " + std::to_string(r) + ": " + f[5];
      } else if (toInt(f[4]) > 0) {
        why = "rank " + std::to_string(r) + " received " + f[4] + " wrong bytes";
      }
      if (r == p->a && f[1] == "ok") {
        p->latencyUs = toDouble(f[2]);
        p->bandwidthGBps = toDouble(f[3]);
      }
      if (!why.empty()) {
        ok = false;
        p->status = Status::Fail;
        p->error += (p->error.empty() ? "" : "; ") + why;
        fail("ping-pong of pair " + std::to_string(p->a) + "-" + std::to_string(p->b) + ": " + why);
        say("  FAIL ping-pong of pair " + std::to_string(p->a) + "-" + std::to_string(p->b) + ": " +
            why);
      }
    }
  }
  // Outliers, within each link class (shm pairs against shm pairs, tcp against tcp).
  std::vector<std::string> classes;
  for (const PairInfo& p : report_.pairs)
    if (std::find(classes.begin(), classes.end(), p.path) == classes.end())
      classes.push_back(p.path);
  int outliers = 0;
  for (const std::string& cls : classes) {
    std::vector<double> lat, bw;
    for (const PairInfo& p : report_.pairs) {
      if (p.path != cls) continue;
      if (p.latencyUs >= 0) lat.push_back(p.latencyUs);
      if (p.bandwidthGBps >= 0) bw.push_back(p.bandwidthGBps);
    }
    const double latMedian = median(lat);
    const double bwMedian = median(bw);
    for (PairInfo& p : report_.pairs) {
      if (p.path != cls) continue;
      const std::string name = "pair " + std::to_string(p.a) + "-" + std::to_string(p.b);
      if (p.latencyUs >= 0 && isLatencyOutlier(p.latencyUs, latMedian)) {
        p.latencyOutlier = true;
        ++outliers;
        report_.warnings.push_back(name + " (" + cls + "): latency " + fixed(p.latencyUs, 1) +
                                   " us > " + fixed(kLatencyOutlierFactor, 0) + " x the " + cls +
                                   " median " + fixed(latMedian, 1) + " us");
      }
      if (p.bandwidthGBps >= 0 && isBandwidthOutlier(p.bandwidthGBps, bwMedian)) {
        p.bandwidthOutlier = true;
        ++outliers;
        report_.warnings.push_back(name + " (" + cls + "): bandwidth " + fixed(p.bandwidthGBps, 3) +
                                   " GB/s < the " + cls + " median " + fixed(bwMedian, 3) +
                                   " GB/s / " + fixed(kBandwidthOutlierFactor, 0));
      }
    }
  }
  if (rank_ == 0 && size_ > 1) {
    std::ostringstream os;
    printMatrix(os, report_, "latency, us (half round trip)", true);
    printMatrix(os, report_, "bandwidth, GB/s (bytes / half round trip)", false);
    std::fputs(os.str().c_str(), reportFile());
  }
  if (size_ < 2) say("  (one rank: no pairs to measure)");
  const Status outlierStatus = args_.strict ? Status::Fail : Status::Warn;
  for (const std::string& w : report_.warnings) {
    say(std::string("  ") + toString(outlierStatus) + " outlier: " + w);
    if (args_.strict) fail("outlier: " + w);
  }
  if (outliers > 0 && args_.strict) ok = false;
  Status status = ok ? (outliers > 0 ? Status::Warn : Status::Pass) : Status::Fail;
  const std::string detail =
      counted(report_.pairs.size(), "pair") + ", " + counted(outliers, "outlier");
  if (ok) say(std::string("  ") + toString(status) + " " + detail);
  stage("performance", status, detail);
  return ok;
}

// ---------------------------------------------------------------- 5: collectives

bool Checker::checkCollectives() {
  const auto& names = CollectiveChecker::names();
  say("[5/5] collectives (each once, fp32, about " + tools::formatBytes(args_.collectiveBytes) +
      ", outputs checked on every rank; time: max over ranks)");
  std::string post;
  std::string firstError;
  CollectiveChecker checker(*comm_, args_.collectiveBytes);
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (!firstError.empty()) {
      post += std::to_string(i) + "\tskip\t\t0\t-1\t0\t" +
              field("not run: the communicator failed earlier") + "\n";
      continue;
    }
    try {
      const CollectiveOutcome o = checker.run(i);
      post += std::to_string(i) + "\tok\t" + field(o.algo) + "\t" + std::to_string(o.bytes) + "\t" +
              fixed(o.seconds * 1e6, 3) + "\t" + std::to_string(o.wrong) + "\t\n";
      if (o.wrong > 0) localFailure(names[i] + ": " + std::to_string(o.wrong) + " wrong elements");
    } catch (const std::exception& e) {
      firstError = e.what();
      post += std::to_string(i) + "\terr\t\t0\t-1\t0\t" + field(firstError) + "\n";
      localFailure(names[i] + ": " + firstError);
    }
  }
  board_->post("collectives", post);
  const auto posts = board_->collect("collectives", opTimeout_ * static_cast<int>(names.size() + 1),
                                     std::max(waitTimeout_, opTimeout_), reporting());
  noteMissing(posts, "its collective results");

  report_.collectives.resize(names.size());
  for (std::size_t i = 0; i < names.size(); ++i) report_.collectives[i].name = names[i];
  std::vector<std::vector<std::string>> perRankWrong(names.size());
  std::vector<bool> skippedOn(names.size(), false);  // a rank's communicator failed before it
  for (int r = 0; r < size_; ++r) {
    if (!posts[static_cast<std::size_t>(r)]) {
      for (auto& c : report_.collectives)
        c.error += (c.error.empty() ? "" : "; ") + std::string("rank ") + std::to_string(r) +
                   " did not report";
      continue;
    }
    for (const std::string& rec : splitRecords(*posts[static_cast<std::size_t>(r)])) {
      const auto f = splitFields(rec);
      if (f.size() < 7) continue;
      const long long i = toInt(f[0]);
      if (i < 0 || i >= static_cast<long long>(names.size())) continue;
      CollectiveInfo& c = report_.collectives[static_cast<std::size_t>(i)];
      if (f[1] == "ok") {
        if (r == 0 || c.algo.empty()) c.algo = f[2];
        c.bytes = std::max<std::size_t>(c.bytes, static_cast<std::size_t>(toInt(f[3])));
        c.timeUs = std::max(c.timeUs, toDouble(f[4]));
        const long long w = toInt(f[5]);
        c.wrong += w;
        if (w > 0)
          perRankWrong[static_cast<std::size_t>(i)].push_back("rank " + std::to_string(r) + ": " +
                                                              std::to_string(w));
      } else if (f[1] == "skip") {
        skippedOn[static_cast<std::size_t>(i)] = true;
      } else {
        c.error +=
            (c.error.empty() ? "" : "; ") + std::string("rank ") + std::to_string(r) + ": " + f[6];
      }
    }
  }
  int passed = 0;
  int skipped = 0;
  for (std::size_t i = 0; i < names.size(); ++i) {
    CollectiveInfo& c = report_.collectives[i];
    if (c.wrong > 0) {
      std::string who;
      for (const std::string& s : perRankWrong[i]) who += (who.empty() ? "" : ", ") + s;
      c.error +=
          (c.error.empty() ? "" : "; ") + std::to_string(c.wrong) + " wrong elements (" + who + ")";
    }
    // Not run on some rank (its communicator failed on an earlier collective) and nothing
    // wrong seen: skipped, not a failure of its own; the earlier failure is reported.
    c.status = !c.error.empty() ? Status::Fail : skippedOn[i] ? Status::Skipped : Status::Pass;
    char line[256];
    std::snprintf(line, sizeof line, "  %s %-15s %-22s %8s %10s us", toString(c.status),
                  c.name.c_str(), c.algo.empty() ? "-" : c.algo.c_str(),
                  tools::formatBytes(c.bytes).c_str(),
                  c.timeUs >= 0 ? fixed(c.timeUs, 1).c_str() : "-");
    if (c.status == Status::Pass) {
      ++passed;
      say(line);
    } else if (c.status == Status::Skipped) {
      ++skipped;
      c.error = "not run: the communicator failed earlier";
      say(std::string(line) + "  " + c.error);
    } else {
      say(std::string(line) + "  " + c.error);
      fail("collective " + c.name + ": " + c.error);
    }
  }
  const bool ok = passed == static_cast<int>(names.size());
  std::string detail =
      std::to_string(passed) + " of " + std::to_string(names.size()) + " collectives passed";
  if (skipped > 0) detail += ", " + std::to_string(skipped) + " not run";
  if (ok) say("  PASS " + detail);
  stage("collectives", ok ? Status::Pass : Status::Fail, detail);
  // Who arrived last at those collectives (information, never a failure): every rank takes
  // part, which it does only when every rank reported its collectives.
  if (ok && size_ > 1) {
    try {
      report_.straggler = comm_->stragglerReport();
      std::istringstream lines(report_.straggler);
      for (std::string l; std::getline(lines, l);) say("  " + l);
    } catch (const std::exception& e) {
      say(std::string("  straggler report unavailable: ") + e.what());
    }
  }
  return ok;
}

// ---------------------------------------------------------------- summary

int Checker::finish() {
  if (report_.exitCode == 0) {
    if (incomplete_)
      report_.exitCode = kExitIncomplete;
    else if (!report_.failures.empty())
      report_.exitCode = kExitFailed;
  }
  const char* kStages[] = {"store", "ranks", "pairs", "performance", "collectives"};
  for (const char* s : kStages) {
    bool seen = false;
    for (const StageInfo& st : report_.stages) seen = seen || st.name == s;
    if (!seen) stage(s, Status::Skipped, "not run: an earlier stage failed");
  }
  if (report_.exitCode == 0) {
    say("summary: PASS: " + counted(size_, "rank") + ", " + counted(report_.pairs.size(), "pair") +
        ", " + counted(report_.collectives.size(), "collective") +
        (report_.warnings.empty()
             ? ""
             : ", " + std::to_string(report_.warnings.size()) + " outlier warnings") +
        " (exit 0)");
  } else {
    say("summary: FAIL (exit " + std::to_string(report_.exitCode) +
        "): " + std::to_string(report_.failures.size()) +
        (report_.failures.size() == 1 ? " problem" : " problems"));
    for (const std::string& f : report_.failures) say("  - " + f);
  }
  if (rank_ == 0 && args_.jsonPath) {
    if (*args_.jsonPath == "-") {
      writeJson(std::cout, report_);
      std::cout.flush();
    } else {
      std::ofstream out(*args_.jsonPath, std::ios::out | std::ios::trunc);
      writeJson(out, report_);
      if (!out) {
        std::fprintf(stderr, "braid-check: cannot write --json file '%s': %s\n",
                     args_.jsonPath->c_str(), std::strerror(errno));
        if (report_.exitCode == 0) report_.exitCode = kExitUsage;
      }
    }
  }
  // Rank 0 serves the store: it leaves only once every rank that joined has read what it needs.
  if (board_) {
    try {
      board_->post("done", "1");
      if (rank_ == 0 && server_) board_->collect("done", waitTimeout_, waitTimeout_, reporting());
    } catch (const std::exception&) {
      // The store went away; every result is already reported.
    }
  }
  return report_.exitCode;
}

int Checker::run() {
  if (rank_ == 0)
    say("braid-check (braid " + std::string(braid::version()) + "): " + std::to_string(size_) +
        " ranks, launch " + launch_.source + ", timeout " + seconds(waitTimeout_) +
        (opTimeout_ != waitTimeout_ ? " (operations " + seconds(opTimeout_) + ")" : ""));
  try {
    if (checkStore() && checkRanks() && checkPairs() && checkPerformance()) checkCollectives();
  } catch (const std::exception& e) {
    // The store failed under us (rank 0 gone, or its connection broke).
    const std::string what =
        "rank " + std::to_string(rank_) + " lost the store at " + storeAddress_ + ": " + e.what();
    fail(what);
    localFailure(what);
    incomplete_ = true;
  }
  return finish();
}

int run(int argc, char** argv) {
  CheckArgs args;
  try {
    args = parseCheckArgs(argc, argv);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "braid-check: %s\n(braid-check --help shows the usage)\n", e.what());
    return kExitUsage;
  }
  if (args.help) {
    std::fputs(kCheckUsage, stdout);
    return 0;
  }
  LaunchInfo launch;
  Options options;
  try {
    launch = LaunchInfo::fromEnv();
    options = Options::fromEnv();
    // Every pair is checked, so every pair connects: at creation, where a failure names the
    // pair before any measurement (BRAID_CONNECT=lazy would only defer it).
    options.lazyConnect = false;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "braid-check: invalid environment: %s\n", e.what());
    return kExitUsage;
  }
  Checker checker(args, launch, options);
  return checker.run();
}

}  // namespace
}  // namespace braid::check

int main(int argc, char** argv) {
  return braid::check::run(argc, argv);
}
