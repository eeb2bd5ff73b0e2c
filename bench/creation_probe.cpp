// One rank of bench/creation_scale.sh: waits for the driver's start signal (so that every rank
// starts at once, however long the launcher took to start them all), then times the creation of
// the world communicator (Comm::fromEnv) and its first collective (a 4-byte allreduce), and
// counts the sockets it holds after that collective. Rank 0 prints one JSON line with the max
// over ranks of each, and the CPU time (user + system, every thread of the process) creation
// took: max and mean over ranks. With more ranks than CPUs, creation time is bounded below by
// the sum of the ranks' CPU times over the CPUs.
//   BENCH_READY_DIR  the rank creates <dir>/<rank> once started
//   BENCH_GO_FIFO    then opens this FIFO for reading: the open returns when the driver opens it
//                    for writing, that is when every rank is ready
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <braid/braid.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

/// CPU time of the whole process so far (user + system, all threads), in ms.
double cpuMs() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return (u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1e3 +
         (u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-3;
}

}  // namespace

int main() {
  using Clock = std::chrono::steady_clock;
  const char* ready = std::getenv("BENCH_READY_DIR");
  const char* go = std::getenv("BENCH_GO_FIFO");
  const char* rankText = std::getenv("RANK");
  if (ready != nullptr && go != nullptr && rankText != nullptr) {
    const std::string mark = std::string(ready) + "/" + rankText;
    const int fd = ::open(mark.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
    if (fd >= 0) ::close(fd);
    const int g = ::open(go, O_RDONLY | O_CLOEXEC);  // blocks until the driver opens it
    if (g < 0) {
      std::perror("creation_probe: BENCH_GO_FIFO");
      return 1;
    }
    char c;
    while (::read(g, &c, 1) > 0) {
    }
    ::close(g);
  }
  try {
    const double c0 = cpuMs();
    const auto t0 = Clock::now();
    auto comm = braid::Comm::fromEnv();
    const auto t1 = Clock::now();
    const double cpu = cpuMs() - c0;
    float x = 1.0f;
    comm->allreduce(&x, &x, 1, braid::DataType::Float32, braid::ReduceOp::Sum);
    const auto t2 = Clock::now();
    const double ms = 1e-3;
    double v[3] = {
        std::chrono::duration<double, std::micro>(t1 - t0).count() * ms,
        std::chrono::duration<double, std::micro>(t2 - t1).count() * ms,
        static_cast<double>(comm->connectionCount()),
    };
    const bool right = x == static_cast<float>(comm->size());
    comm->allreduce(v, v, 3, braid::DataType::Float64, braid::ReduceOp::Max);
    double c[2] = {cpu, cpu};  // max, sum
    comm->allreduce(&c[0], &c[0], 1, braid::DataType::Float64, braid::ReduceOp::Max);
    comm->allreduce(&c[1], &c[1], 1, braid::DataType::Float64, braid::ReduceOp::Sum);
    if (comm->rank() == 0)
      std::printf(
          "{\"impl\":\"braid\",\"nranks\":%d,\"init_ms\":%.3f,\"first_ms\":%.3f,"
          "\"connections\":%.0f,\"init_cpu_ms_max\":%.3f,\"init_cpu_ms_mean\":%.3f,"
          "\"correct\":%s}\n",
          comm->size(), v[0], v[1], v[2], c[0], c[1] / comm->size(), right ? "true" : "false");
    return right ? 0 : 3;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "creation_probe: %s\n", e.what());
    return 1;
  }
}
