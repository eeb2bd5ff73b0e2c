// braid-run: starts the local ranks of a braid job, like torchrun or mpirun on one node.
//
//   braid-run -n N [--nnodes M --node-rank K --master HOST:PORT] [--] PROGRAM ARGS...
//
// Each rank gets the BRAID_* launch variables (and torchrun's names, so torch programs run
// unchanged); its output comes back line by line prefixed with "[rank] ". The job fails as soon
// as one rank fails: the others are stopped and braid-run exits non-zero naming the rank.
//
// Security: every job is authenticated. braid-run passes BRAID_AUTH_KEY through when it is set,
// and otherwise generates a fresh 256-bit key for the job (one node only: separate braid-runs
// on several nodes cannot agree on one, so there the key must come from the environment).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <braid/braid.hpp>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <iostream>
#include <memory>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "binding.hpp"
#include "common/crypto.hpp"
#include "common/fd.hpp"
#include "launcher.hpp"

extern char** environ;

namespace braid::run {
namespace {

constexpr const char* kUsage = R"(usage: braid-run -n N [options] [--] PROGRAM [ARGS...]

Starts N ranks of PROGRAM on this node and waits for all of them. Each rank's stdout and stderr
come back line by line, prefixed with "[RANK] ". When a rank fails (non-zero exit or a signal)
the other ranks get SIGTERM, then SIGKILL after the grace period, and braid-run exits with the
failed rank's status (128 + signal when it was killed).

options:
  -n, --nproc-per-node N  ranks to start on this node (required; torchrun's --nproc_per_node
                          and --node_rank spellings work too)
  --nnodes M              nodes in the job (default 1); run one braid-run per node
  --node-rank K           this node's index, 0..M-1 (default 0)
  --master HOST:PORT      the job's store; global rank 0 (on node 0) serves it. Required when
                          M > 1. Default on one node: 127.0.0.1 and a free port.
  --timeout SECONDS       stop every rank and exit 124 after this long
  --grace SECONDS         wait between SIGTERM and SIGKILL when stopping ranks (default 3)
  --max-failures K        keep the job running while at most K ranks have failed (the others
                          shrink their communicators: docs/reliability.md); exit 0 when every
                          other rank exits 0. On one node braid-run then serves the store itself
                          (BRAID_STORE_EXTERNAL=1), so that any rank, rank 0 too, may die
  --bind MODE             auto (default): on one node, bind each rank to cores of its own
                          (braid-run's CPU affinity mask split evenly, whole cores, at least
                          one per rank; Open MPI binds too); core: always (fails with fewer
                          cores than ranks); none: never.
                          Unbound ranks that wait for each other can share one CPU for tens
                          of ms before Linux separates them
  --report-bindings       print each rank's CPUs (or why none are bound) to stderr
  --no-prefix             relay output lines without the "[RANK] " prefix
  --no-auth               do not generate BRAID_AUTH_KEY (connections are then authenticated
                          only if BRAID_AUTH_KEY is already set)
  -h, --help              show this help

environment of each rank (global rank = node_rank * N + local rank):
  BRAID_RANK BRAID_WORLD_SIZE BRAID_LOCAL_RANK BRAID_LOCAL_WORLD_SIZE BRAID_NODE_RANK
  BRAID_STORE=HOST:PORT
  BRAID_AUTH_KEY: passed through when set; otherwise, unless BRAID_AUTH_KEY_FILE is set (the
  ranks then read the key from that file), a fresh random key for this job (on one node; with
  --nnodes > 1 set the same BRAID_AUTH_KEY or BRAID_AUTH_KEY_FILE on every node). Every store and peer
  connection of the job proves knowledge of it (docs/security.md).
  torchrun's RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE GROUP_RANK ROLE_RANK ROLE_WORLD_SIZE
  MASTER_ADDR MASTER_PORT (MASTER_PORT differs from braid's store port, so that a program that
  also creates torch's own store does not collide with braid's: with --master the store port
  + 1; on one host both are free ports drawn below the kernel's ephemeral port range, where no
  outgoing connection can take them before the stores bind them)

SIGINT, SIGTERM and SIGHUP are forwarded to the ranks (a second one kills them). Rank 0 reads
braid-run's stdin unless it is a terminal; the other ranks read /dev/null.
)";

struct Args {
  int nproc = 0;
  int nnodes = 1;
  int nodeRank = 0;
  std::string masterHost;
  int masterPort = 0;
  bool generateKey = true;
  BindMode bind = BindMode::Auto;
  bool reportBindings = false;
  LaunchSettings settings;
  std::vector<std::string> program;
};

class UsageError : public std::exception {
 public:
  explicit UsageError(std::string m) : message_(std::move(m)) {}
  const char* what() const noexcept override { return message_.c_str(); }

 private:
  std::string message_;
};

int parseInt(std::string_view option, std::string_view text, int min, int max) {
  int value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < min || value > max)
    throw UsageError(std::string(option) + ": expected an integer in [" + std::to_string(min) +
                     ", " + std::to_string(max) + "], got '" + std::string(text) + "'");
  return value;
}

std::chrono::milliseconds parseSeconds(std::string_view option, std::string_view text) {
  double seconds = -1;
  try {
    std::size_t used = 0;
    seconds = std::stod(std::string(text), &used);
    if (used != text.size()) seconds = -1;
  } catch (const std::exception&) {
    seconds = -1;
  }
  if (!(seconds >= 0) || !std::isfinite(seconds) || seconds > 1e9)
    throw UsageError(std::string(option) + ": expected seconds (>= 0), got '" + std::string(text) +
                     "'");
  return std::chrono::milliseconds(static_cast<std::int64_t>(std::llround(seconds * 1000.0)));
}

void parseMaster(std::string_view text, Args& args) {
  const std::size_t colon = text.rfind(':');
  if (colon == std::string_view::npos || colon == 0)
    throw UsageError("--master: expected HOST:PORT, got '" + std::string(text) + "'");
  std::string_view host = text.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')  // [v6 address]
    host = host.substr(1, host.size() - 2);
  args.masterHost = std::string(host);
  args.masterPort = parseInt("--master port", text.substr(colon + 1), 1, 65534);
}

Args parseArgs(int argc, char** argv) {
  Args args;
  bool haveN = false;
  int i = 1;
  // Options accept "--name value" and "--name=value"; "-n4" too.
  auto value = [&](std::string_view arg, std::string_view name) -> std::optional<std::string> {
    if (arg == name) {
      if (i + 1 >= argc) throw UsageError(std::string(name) + " needs a value");
      return std::string(argv[++i]);
    }
    if (arg.size() > name.size() && arg.starts_with(name)) {
      if (name.starts_with("--") && arg[name.size()] == '=')
        return std::string(arg.substr(name.size() + 1));
      if (!name.starts_with("--")) return std::string(arg.substr(name.size()));
    }
    return std::nullopt;
  };
  for (; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg.empty() || arg[0] != '-') break;  // the program starts here
    if (arg == "-h" || arg == "--help") {
      std::cout << kUsage;
      std::exit(0);
    }
    if (arg == "--no-prefix") {
      args.settings.prefixOutput = false;
    } else if (arg == "--no-auth") {
      args.generateKey = false;
    } else if (auto v = value(arg, "-n")) {
      args.nproc = parseInt("-n", *v, 1, 4096);
      haveN = true;
    } else if (arg == "--report-bindings") {
      args.reportBindings = true;
    } else if (auto vb = value(arg, "--bind")) {
      try {
        args.bind = parseBindMode(*vb);
      } catch (const std::invalid_argument& e) {
        throw UsageError(e.what());
      }
    } else if (auto v2 = value(arg, "--nproc-per-node")) {
      args.nproc = parseInt("--nproc-per-node", *v2, 1, 4096);
      haveN = true;
    } else if (auto v2b = value(arg, "--nproc_per_node")) {  // torchrun's spelling
      args.nproc = parseInt("--nproc_per_node", *v2b, 1, 4096);
      haveN = true;
    } else if (auto v3 = value(arg, "--nnodes")) {
      args.nnodes = parseInt("--nnodes", *v3, 1, 1 << 20);
    } else if (auto v4 = value(arg, "--node-rank")) {
      args.nodeRank = parseInt("--node-rank", *v4, 0, (1 << 20) - 1);
    } else if (auto v4b = value(arg, "--node_rank")) {  // torchrun's spelling
      args.nodeRank = parseInt("--node_rank", *v4b, 0, (1 << 20) - 1);
    } else if (auto v5 = value(arg, "--master")) {
      parseMaster(*v5, args);
    } else if (auto v6 = value(arg, "--timeout")) {
      args.settings.timeout = parseSeconds("--timeout", *v6);
    } else if (auto v7 = value(arg, "--grace")) {
      args.settings.grace = parseSeconds("--grace", *v7);
    } else if (auto v8 = value(arg, "--max-failures")) {
      args.settings.maxFailures = parseInt("--max-failures", *v8, 0, 1 << 20);
    } else {
      throw UsageError("unknown option '" + std::string(arg) + "'");
    }
  }
  for (; i < argc; ++i) args.program.emplace_back(argv[i]);
  if (!haveN) throw UsageError("-n N is required");
  if (args.program.empty()) throw UsageError("no program to run");
  if (args.nodeRank >= args.nnodes)
    throw UsageError("--node-rank " + std::to_string(args.nodeRank) + " is not below --nnodes " +
                     std::to_string(args.nnodes));
  if (args.nnodes > 1 && args.masterHost.empty())
    throw UsageError("--master HOST:PORT is required with --nnodes > 1");
  if (static_cast<long long>(args.nnodes) * args.nproc > (1LL << 30))
    throw UsageError("too many ranks");
  return args;
}

/// Whether a TCP socket can bind 127.0.0.1:`port` now (0: any port; then `port` gets the one
/// the kernel picked).
bool canBind(int& port) {
  const Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) throw std::runtime_error("socket: " + errnoText(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  socklen_t len = sizeof addr;
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) return false;
  if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len) != 0) return false;
  port = ntohs(addr.sin_port);
  return true;
}

/// A port nobody listens on right now, for braid's store and torch's (MASTER_PORT). Drawn at
/// random below the kernel's ephemeral range (ip_local_port_range, from 10000 up) and checked
/// by binding it: a port bind(0) hands out lies inside that range, and once released the kernel
/// may give it to any outgoing connection as its local port (the ranks' own connections to
/// braid's store included, or another job's), and the store that binds it next fails with
/// EADDRINUSE. bind(0) only when the range starts too low or 100 draws found nothing. Another
/// process could still take the port before rank 0 binds it; the window is short and the
/// failure loud.
int pickFreePort() {
  int low = 32768;
  if (std::FILE* f = std::fopen("/proc/sys/net/ipv4/ip_local_port_range", "re")) {
    if (std::fscanf(f, "%d", &low) != 1) low = 32768;
    std::fclose(f);
  }
  constexpr int kFrom = 10000;
  if (low > kFrom + 2000) {
    std::random_device seed;
    std::mt19937 rng(seed());
    std::uniform_int_distribution<int> draw(kFrom, low - 1);
    for (int i = 0; i < 100; ++i) {
      int port = draw(rng);
      if (canBind(port)) return port;
    }
  }
  int port = 0;
  if (!canBind(port)) throw std::runtime_error("cannot pick a free port: " + errnoText(errno));
  return port;
}

/// The inherited environment with `overrides` replacing variables of the same name.
std::vector<std::string> makeEnvironment(
    const std::vector<std::pair<std::string, std::string>>& overrides) {
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string_view entry(*e);
    const std::string_view name = entry.substr(0, entry.find('='));
    bool replaced = false;
    for (const auto& [k, v] : overrides) replaced = replaced || name == k;
    if (!replaced) env.emplace_back(entry);
  }
  for (const auto& [k, v] : overrides) env.push_back(std::string(k).append("=").append(v));
  return env;
}

int run(int argc, char** argv) {
  Args args = parseArgs(argc, argv);
  std::string host = args.masterHost;
  int storePort = args.masterPort;
  int torchPort = storePort + 1;
  if (host.empty()) {
    host = "127.0.0.1";
    storePort = pickFreePort();
    do {
      torchPort = pickFreePort();
    } while (torchPort == storePort);
  }
  const std::string store = (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" +
                            std::to_string(storePort);
  const int world = args.nnodes * args.nproc;

  std::vector<std::pair<std::string, std::string>> common;
  const char* inherited = std::getenv("BRAID_AUTH_KEY");
  const char* keyFile = std::getenv("BRAID_AUTH_KEY_FILE");  // the ranks read it themselves
  if ((inherited == nullptr || *inherited == '\0') && (keyFile == nullptr || *keyFile == '\0') &&
      args.generateKey) {
    if (args.nnodes == 1) {
      std::array<std::uint8_t, 32> key;
      braid::crypto::randomBytes(key);
      common.emplace_back("BRAID_AUTH_KEY", braid::crypto::toHex(key));
    } else {
      std::cerr << "braid-run: warning: BRAID_AUTH_KEY is not set, and braid-runs on "
                << args.nnodes
                << " nodes cannot generate one key they share: this job's connections are not "
                   "authenticated. Set the same BRAID_AUTH_KEY on every node (e.g. "
                   "BRAID_AUTH_KEY=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \\n')), or pass "
                   "--no-auth to silence this.\n";
    }
  }

  BindingPlan binding;
  try {
    binding = planBinding(args.bind, args.nproc, args.nnodes, allowedCores());
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
  // --max-failures on one node: the store lives here, not in rank 0, so it survives any rank.
  std::unique_ptr<braid::TcpStoreServer> storeServer;
  if (args.settings.maxFailures > 0 && args.masterHost.empty()) {
    braid::SecurityOptions security = braid::Options::fromEnv().security;
    for (const auto& [k, v] : common)
      if (k == "BRAID_AUTH_KEY") security.authKey = v;
    // The server's thread must not take the signals the launcher reads from its signalfd
    // (SIGCHLD above all): it starts with them blocked, as the launcher blocks them later.
    sigset_t handled, previous;
    sigemptyset(&handled);
    for (int sig : {SIGCHLD, SIGINT, SIGTERM, SIGHUP}) sigaddset(&handled, sig);
    ::pthread_sigmask(SIG_BLOCK, &handled, &previous);
    storeServer = std::make_unique<braid::TcpStoreServer>(
        host, static_cast<std::uint16_t>(storePort), security);
    ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);
    common.emplace_back("BRAID_STORE_EXTERNAL", "1");
  }
  std::vector<RankSpec> specs;
  for (int local = 0; local < args.nproc; ++local) {
    const int rank = args.nodeRank * args.nproc + local;
    const std::vector<std::pair<std::string, std::string>> vars = {
        {"BRAID_RANK", std::to_string(rank)},
        {"BRAID_WORLD_SIZE", std::to_string(world)},
        {"BRAID_LOCAL_RANK", std::to_string(local)},
        {"BRAID_LOCAL_WORLD_SIZE", std::to_string(args.nproc)},
        {"BRAID_NODE_RANK", std::to_string(args.nodeRank)},
        {"BRAID_STORE", store},
        {"RANK", std::to_string(rank)},
        {"WORLD_SIZE", std::to_string(world)},
        {"LOCAL_RANK", std::to_string(local)},
        {"LOCAL_WORLD_SIZE", std::to_string(args.nproc)},
        {"GROUP_RANK", std::to_string(args.nodeRank)},
        {"ROLE_RANK", std::to_string(rank)},
        {"ROLE_WORLD_SIZE", std::to_string(world)},
        {"MASTER_ADDR", host},
        {"MASTER_PORT", std::to_string(torchPort)},
    };
    std::vector<std::pair<std::string, std::string>> all = vars;
    all.insert(all.end(), common.begin(), common.end());
    specs.push_back(RankSpec{rank, args.program, makeEnvironment(all),
                             binding.cpus[static_cast<std::size_t>(local)]});
    if (args.reportBindings) {
      std::string cpus;
      for (int c : specs.back().cpus) cpus += (cpus.empty() ? "" : ",") + std::to_string(c);
      std::cerr << "braid-run: rank " << rank << ": "
                << (cpus.empty() ? binding.note : "bound to CPU " + cpus) << "\n";
    }
  }
  return launch(specs, args.settings);
}

}  // namespace
}  // namespace braid::run

int main(int argc, char** argv) {
  try {
    return braid::run::run(argc, argv);
  } catch (const braid::run::UsageError& e) {
    std::cerr << "braid-run: " << e.what() << "\n(braid-run --help shows the usage)\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "braid-run: " << e.what() << "\n";
    return 1;
  }
}
