// What braid-check found, as rank 0 assembles it from every rank's posts: the human report
// (printed stage by stage as the check goes) and the JSON document (--json) written at the end.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace braid::check {

enum class Status { Pass, Warn, Fail, Skipped };
const char* toString(Status s);

struct RankInfo {
  bool joined = false;
  std::string host;     // gethostname()
  std::string address;  // the address this rank reaches the store from (its listen address)
  long long pid = 0;
  std::string launch;  // LaunchInfo::source
  double storeConnectMs = 0;
};

struct PairInfo {
  int a = 0, b = 0;       // a < b
  std::string path;       // as rank a reaches b: shm+cma, shm, tcp
  std::string endpointA;  // rank a as rank b's transport knows it (address:port over tcp,
                          // "pid N on HOST" through shared memory)
  std::string endpointB;  // rank b as rank a's transport knows it
  Status status = Status::Skipped;
  std::string error;          // why it failed, naming the rank that saw it
  double rttUs = -1;          // the connectivity round trip
  double latencyUs = -1;      // half round trip, small messages
  double bandwidthGBps = -1;  // bytes / half round trip, large messages
  bool latencyOutlier = false;
  bool bandwidthOutlier = false;
};

struct CollectiveInfo {
  std::string name;
  std::string algo;
  std::size_t bytes = 0;
  double timeUs = -1;      // max over ranks
  std::int64_t wrong = 0;  // summed over ranks
  Status status = Status::Skipped;
  std::string error;  // first error per failing rank, "rank r: ..."
};

struct StageInfo {
  std::string name;
  Status status = Status::Skipped;
  std::string detail;
};

struct CheckReport {
  std::string version;
  std::string launch;
  std::string store;  // host:port
  int nranks = 0;
  double timeoutS = 0;
  std::size_t latencyBytes = 0, bandwidthBytes = 0, collectiveBytes = 0;
  int latencyIters = 0, bandwidthIters = 0;
  std::vector<StageInfo> stages;
  std::vector<RankInfo> ranks;
  std::vector<PairInfo> pairs;
  std::vector<CollectiveInfo> collectives;
  std::vector<std::string> failures;
  std::vector<std::string> warnings;
  /// Comm::stragglerReport over the collectives of stage 5 (empty: not run).
  std::string straggler;
  int exitCode = 0;

  /// The pair (min(a,b), max(a,b)), or nullptr.
  PairInfo* pair(int a, int b);
  const PairInfo* pair(int a, int b) const;
};

/// The matrix of a per-pair value (symmetric; "-" on the diagonal and where unmeasured), with
/// outliers marked by '!'.
void printMatrix(std::ostream& os, const CheckReport& r, const char* title, bool latency);

/// The whole report as one JSON object.
void writeJson(std::ostream& os, const CheckReport& r);

}  // namespace braid::check
