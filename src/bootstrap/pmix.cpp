#include "bootstrap/pmix.hpp"

#include <algorithm>
#include <atomic>
#include <braid/error.hpp>

#ifdef BRAID_HAVE_PMIX
#include <pmix.h>

#endif

namespace braid::bootstrap {

#ifdef BRAID_HAVE_PMIX

namespace {

std::string describe(const std::string& call, pmix_status_t rc) {
  return call + " failed: " + PMIx_Error_string(rc) + " (status " + std::to_string(rc) + ")";
}

// PMIx_Init is reference-counted; this pairs every successful init with its finalize, on every
// exit path (a process that initialised PMIx and exits without finalising is reported by
// mpirun as an abnormal termination).
class Session {
 public:
  Session() {
    const pmix_status_t rc = PMIx_Init(&me_, nullptr, 0);
    if (rc != PMIX_SUCCESS)
      throw Error(ErrorCode::InvalidArgument,
                  "PMIx store exchange: " + describe("PMIx_Init", rc) +
                      " (the launcher's PMIx server is not reachable; set BRAID_STORE=HOST:PORT)");
  }
  ~Session() { PMIx_Finalize(nullptr, 0); }
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;
  const pmix_proc_t& me() const { return me_; }

 private:
  pmix_proc_t me_{};
};

}  // namespace

bool pmixBuilt() noexcept {
  return true;
}

std::string pmixExchange(const std::string& mine, int rank, std::chrono::milliseconds timeout) {
  static std::atomic<unsigned> sequence{0};
  const std::string key = "braid.store." + std::to_string(sequence.fetch_add(1));
  Session session;
  const pmix_proc_t& me = session.me();
  const std::string where = "PMIx store exchange (rank " + std::to_string(rank) + ", namespace " +
                            std::string(me.nspace) + "): ";
  if (me.rank != static_cast<pmix_rank_t>(rank))
    throw Error(ErrorCode::InvalidArgument,
                where + "PMIx says this process is rank " + std::to_string(me.rank) +
                    "; the launcher's environment says " + std::to_string(rank));
  if (me.rank == 0) {
    pmix_value_t value;
    PMIX_VALUE_CONSTRUCT(&value);
    value.type = PMIX_STRING;
    value.data.string = const_cast<char*>(mine.c_str());
    pmix_status_t rc = PMIx_Put(PMIX_GLOBAL, key.c_str(), &value);
    if (rc != PMIX_SUCCESS) throw Error(ErrorCode::Internal, where + describe("PMIx_Put", rc));
    rc = PMIx_Commit();
    if (rc != PMIX_SUCCESS) throw Error(ErrorCode::Internal, where + describe("PMIx_Commit", rc));
  }
  pmix_proc_t all;
  PMIX_PROC_CONSTRUCT(&all);
  PMIX_LOAD_PROCID(&all, me.nspace, PMIX_RANK_WILDCARD);
  pmix_info_t info[2];
  PMIX_INFO_CONSTRUCT(&info[0]);
  PMIX_INFO_CONSTRUCT(&info[1]);
  bool collect = true;
  PMIX_INFO_LOAD(&info[0], PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
  // PMIX_TIMEOUT is in whole seconds; at least one.
  int seconds = static_cast<int>(std::max<long long>(1, (timeout.count() + 999) / 1000));
  PMIX_INFO_LOAD(&info[1], PMIX_TIMEOUT, &seconds, PMIX_INT);
  pmix_status_t rc = PMIx_Fence(&all, 1, info, 2);
  PMIX_INFO_DESTRUCT(&info[0]);
  PMIX_INFO_DESTRUCT(&info[1]);
  if (rc != PMIX_SUCCESS)
    throw Error(
        rc == PMIX_ERR_TIMEOUT ? ErrorCode::Timeout : ErrorCode::Internal,
        where + describe("PMIx_Fence", rc) + " within " + std::to_string(timeout.count()) + " ms");
  pmix_proc_t root = all;
  root.rank = 0;
  pmix_value_t* got = nullptr;
  rc = PMIx_Get(&root, key.c_str(), nullptr, 0, &got);
  if (rc != PMIX_SUCCESS || got == nullptr)
    throw Error(ErrorCode::Internal, where + describe("PMIx_Get of rank 0's " + key, rc));
  std::string out = got->type == PMIX_STRING && got->data.string != nullptr ? got->data.string : "";
  PMIX_VALUE_RELEASE(got);
  if (out.empty())
    throw Error(ErrorCode::Internal, where + "rank 0 published an empty store address");
  return out;
}

#else  // built without PMIx

bool pmixBuilt() noexcept {
  return false;
}

std::string pmixExchange(const std::string&, int rank, std::chrono::milliseconds) {
  throw Error(ErrorCode::InvalidArgument,
              "rank " + std::to_string(rank) +
                  ": the launcher offers PMIx, but this braid was built without it (libpmix-dev "
                  "was not found at build time); set BRAID_STORE=HOST:PORT, or rebuild with "
                  "libpmix-dev installed");
}

#endif

}  // namespace braid::bootstrap
