// An elastic training loop (docs/reliability.md): data-parallel linear regression whose ranks
// each own a shard of the samples and allreduce their gradient every step. One rank dies in the
// middle (it SIGKILLs itself); the survivors catch the error, shrink, split the samples among
// themselves again, redo the step, and go on; later a replacement process joins and the job
// grows back to full size. Because the gradient is a sum over all samples, however they are
// sharded, the weights must end exactly where a single process gets them: the program checks.
//
//   build/bin/braid-example-elastic [ranks=4] [steps=60]
//
// It serves the store from a process of its own, so that any rank, rank 0 included, may die.
// Under a launcher (no grow: nobody starts a replacement), VICTIM (default: the last rank) dies:
//
//   build/bin/braid-run -n 4 --max-failures 1 -- build/bin/braid-example-elastic --from-env
//   [VICTIM]
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <braid/braid.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

namespace {

constexpr int kFeatures = 8;
constexpr int kSamples = 1000;
constexpr float kRate = 0.05f;

// Sample i: features x_i and target y_i = w*.x_i, generated alike on every rank.
float feature(int i, int f) {
  return static_cast<float>((i * 7 + f * 13) % 17) / 17.0f - 0.5f;
}
float target(int i) {
  float y = 0;
  for (int f = 0; f < kFeatures; ++f) y += static_cast<float>(f + 1) * feature(i, f);
  return y;
}

// The gradient of the squared error over samples [begin, end).
void gradient(const std::vector<double>& w, int begin, int end, std::vector<double>& g) {
  g.assign(kFeatures, 0.0);
  for (int i = begin; i < end; ++i) {
    double pred = 0;
    for (int f = 0; f < kFeatures; ++f) pred += w[f] * feature(i, f);
    const double err = pred - target(i);
    for (int f = 0; f < kFeatures; ++f) g[f] += 2 * err * feature(i, f) / kSamples;
  }
}

// This rank's shard of the samples for a communicator of `size`.
std::pair<int, int> shard(int rank, int size) {
  return {kSamples * rank / size, kSamples * (rank + 1) / size};
}

struct Job {
  std::uint16_t port;
  int ranks;
  int steps;
  int victim;  // kills itself before this step's allreduce
  int dieAt;
  int growAt;  // the survivors grow back at this step
};

braid::Options options() {
  braid::Options o = braid::Options::fromEnv();
  o.execTimeout = std::chrono::seconds(20);
  return o;
}

// Trains from `step` with the weights `w` on `comm`; returns the weights at the end.
int train(const Job& job, std::unique_ptr<braid::Comm> comm, std::vector<double> w, int step,
          std::shared_ptr<braid::Store> store) {
  std::vector<double> g;
  const int me = comm->rank();
  while (step < job.steps) {
    if (step == job.growAt && comm->size() < job.ranks) {
      comm = comm->grow(job.ranks - comm->size());
      comm->broadcast(w.data(), kFeatures, braid::DataType::Float64, 0);  // to the newcomers
      if (comm->rank() == 0) std::printf("step %d: grew back to %d ranks\n", step, comm->size());
    }
    if (step == job.dieAt && comm->rank() == job.victim && comm->size() == job.ranks) {
      std::printf("step %d: rank %d dies\n", step, comm->rank());
      std::fflush(stdout);
      ::raise(SIGKILL);
    }
    const auto [begin, end] = shard(comm->rank(), comm->size());
    gradient(w, begin, end, g);
    try {
      comm->allreduce(g.data(), g.data(), kFeatures, braid::DataType::Float64,
                      braid::ReduceOp::Sum);
    } catch (const braid::Error& e) {
      if (e.code() != braid::ErrorCode::PeerLost && e.code() != braid::ErrorCode::Timeout) throw;
      const int before = comm->size();
      comm = comm->shrink();  // the survivors; the shards follow the new size next iteration
      if (comm->rank() == 0)
        std::printf("step %d: %s\n  shrunk from %d to %d ranks; samples rebalanced, step redone\n",
                    step, e.what(), before, comm->size());
      continue;
    }
    for (int f = 0; f < kFeatures; ++f) w[f] -= kRate * g[f];
    ++step;
  }
  (void)me;
  (void)store;
  if (comm->rank() != 0) return 0;
  if (comm->size() < job.ranks) std::printf("finished on %d ranks\n", comm->size());
  // The same training on one process.
  std::vector<double> serial(kFeatures, 0.0);
  for (int s = 0; s < job.steps; ++s) {
    gradient(serial, 0, kSamples, g);
    for (int f = 0; f < kFeatures; ++f) serial[f] -= kRate * g[f];
  }
  double worst = 0;
  for (int f = 0; f < kFeatures; ++f) worst = std::max(worst, std::fabs(serial[f] - w[f]));
  std::printf(
      "done: %d steps on %d ranks, w[0..2] = %.5f %.5f %.5f, largest difference to one "
      "process %.2e: %s\n",
      job.steps, comm->size(), w[0], w[1], w[2], worst, worst < 1e-9 ? "matches" : "DIFFERS");
  return worst < 1e-9 ? 0 : 3;
}

}  // namespace

int main(int argc, char** argv) {
  Job job{};
  if (argc > 1 && std::string(argv[1]) == "--from-env") {
    // One rank of a launched job (braid-run --max-failures 1): the store is the launcher's.
    auto comm = braid::Comm::fromEnv(options());
    job.ranks = comm->size();
    job.steps = 60;
    job.victim = argc > 2 ? std::atoi(argv[2]) : job.ranks - 1;
    job.dieAt = job.steps / 3;
    job.growAt = job.steps + 1;  // nobody replaces the victim
    const int code = train(job, std::move(comm), std::vector<double>(kFeatures, 0.0), 0, nullptr);
    std::fflush(stdout);
    return code;
  }
  job.ranks = argc > 1 ? std::atoi(argv[1]) : 4;
  job.steps = argc > 2 ? std::atoi(argv[2]) : 60;
  if (job.ranks < 2 || job.steps < 10) {
    std::fprintf(stderr, "usage: %s [ranks >= 2] [steps >= 10]\n", argv[0]);
    return 2;
  }
  job.victim = job.ranks - 1;
  job.dieAt = job.steps / 3;
  job.growAt = 2 * job.steps / 3;

  // The store, in a process of its own.
  int pipeFds[2];
  if (::pipe(pipeFds) != 0) return 1;
  const pid_t storePid = ::fork();
  if (storePid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    braid::TcpStoreServer server("127.0.0.1", 0, options().security);
    const std::uint16_t port = server.port();
    if (::write(pipeFds[1], &port, sizeof port) != static_cast<ssize_t>(sizeof port)) ::_exit(1);
    for (;;) ::pause();
  }
  if (::read(pipeFds[0], &job.port, sizeof job.port) != static_cast<ssize_t>(sizeof job.port))
    return 1;

  auto connect = [&] {
    return std::make_shared<braid::TcpStore>("127.0.0.1", job.port, options().connectTimeout,
                                             braid::TcpStore::kDefaultOpTimeout,
                                             options().security);
  };
  std::vector<pid_t> pids;
  for (int r = 0; r < job.ranks; ++r) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      try {
        auto store = connect();
        auto comm = braid::Comm::create(store, r, job.ranks, options());
        const int code = train(job, std::move(comm), std::vector<double>(kFeatures, 0.0), 0, store);
        std::fflush(stdout);
        ::_exit(code);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
        ::_exit(1);
      }
    }
    pids.push_back(pid);
  }
  // The replacement: waits in join until the survivors grow.
  const pid_t joiner = ::fork();
  if (joiner == 0) {
    try {
      auto store = connect();
      auto comm = braid::Comm::join(store, options(), std::chrono::seconds(60));
      std::vector<double> w(kFeatures);
      comm->broadcast(w.data(), kFeatures, braid::DataType::Float64, 0);
      const int code = train(job, std::move(comm), w, job.growAt, store);
      std::fflush(stdout);
      ::_exit(code);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "joiner: %s\n", e.what());
      ::_exit(1);
    }
  }
  pids.push_back(joiner);
  int failed = 0;
  for (std::size_t i = 0; i < pids.size(); ++i) {
    int st = 0;
    ::waitpid(pids[i], &st, 0);
    const bool victim = static_cast<int>(i) == job.victim;
    if (victim ? !(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL)
               : !(WIFEXITED(st) && WEXITSTATUS(st) == 0))
      ++failed;
  }
  ::kill(storePid, SIGKILL);
  ::waitpid(storePid, nullptr, 0);
  return failed == 0 ? 0 : 1;
}
