// Elastic communicators (docs/reliability.md): revoke, liveness, shrink, grow and join.
//
// Store keys, in the communicator's namespace ("braid/<id>/"):
//   revoked              why the communicator was revoked ("rank R after <error>"); set by the
//                        rank that detected a failure, or that called revoke() or shrink()
//   dead/<r>             rank r is gone: set by the TCP store server when r's liveness
//                        connection closes (r exited, was killed, or destroyed the
//                        communicator), or by r's destructor for other stores
//   shrink/<n>/in/<r>    rank r takes part in shrink round n
//   shrink/<n>/decision/<k>  the members of round n as rank k decided them ("0,2,3")
//   shrink/<n>/ok/<r>, shrink/<n>/fail/<r>  rank r created round n's communicator, or did not
// and in the job's namespace: braid/grow/tickets, braid/grow/granted, braid/grow/ticket/<t>.
//
// Every write of a rank's protocol (in, decision, ok, fail) goes through its liveness
// connection, whose close is what sets dead/<r>: the server serves a connection's requests in
// order and sets the ONCLOSE key after the last one, so once dead/<r> is seen, nothing more from
// r can appear. That is the property the agreement rests on (see shrink()).
#include <unistd.h>

#include <algorithm>
#include <braid/comm.hpp>
#include <braid/launch.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/comm_impl.hpp"
#include "core/liveness.hpp"
#include "core/tag.hpp"

namespace braid {

namespace {

using SteadyClock = std::chrono::steady_clock;
using namespace std::chrono_literals;

std::string joinRanks(const std::vector<int>& ranks) {
  std::string s;
  for (std::size_t i = 0; i < ranks.size(); ++i) s += (i ? "," : "") + std::to_string(ranks[i]);
  return s;
}

std::vector<int> parseRanks(const std::string& s) {
  std::vector<int> out;
  std::size_t at = 0;
  while (at < s.size()) {
    std::size_t end = s.find(',', at);
    if (end == std::string::npos) end = s.size();
    out.push_back(std::stoi(s.substr(at, end - at)));
    at = end + 1;
  }
  return out;
}

bool present(Store& s, const std::string& key) {
  return s.check({key});
}

std::string value(Store& s, const std::string& key) {
  return s.getString(key, 10s);
}

// The bound of an elastic call: the operation timeout (setOpTimeout, else execTimeout).
std::chrono::milliseconds opBound(const Comm::Impl& impl) {
  const std::int64_t t = impl.opTimeoutMs.load(std::memory_order_relaxed);
  return t >= 0 ? std::chrono::milliseconds(t) : impl.opts.execTimeout;
}

// Between two looks at the store: short, as every look is one round trip to it.
void pause() {
  std::this_thread::sleep_for(1ms);
}

}  // namespace

void Comm::Impl::startElastic() {
  if (size <= 1) return;
  liveness = std::make_unique<core::Liveness>(commStore, rank,
                                              [this](const std::string& why) { revokeLocal(why); });
}

void Comm::Impl::stopElastic() {
  liveness.reset();
}

void Comm::Impl::revokeLocal(const std::string& why) {
  {
    std::lock_guard<std::mutex> lk(revokedMu);
    if (revoked.load()) return;
    revokedWhy = why;
    revoked.store(true);
  }
  // The revoker diagnosed the failure; here every operation only reports the revoke.
  failedOnce.store(true);
  aborted.store(true, std::memory_order_release);
  const std::string text = "communicator " + id + " was revoked by " + why;
  transport->abort(text);
  std::deque<Op> dropped;
  {
    std::lock_guard<std::mutex> lk(queueMu);
    dropped.swap(queue);
  }
  for (auto& op : dropped)
    op.work->finish(opFailed(op, std::make_exception_ptr(Error(ErrorCode::Aborted, text))));
  sweepInflight();
}

std::exception_ptr Comm::Impl::elasticFailure(Op& op, std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const Error& e) {
    std::string why;
    {
      std::lock_guard<std::mutex> lk(revokedMu);
      if (!revoked.load()) {
        if (!core::failsCommunicator(op.desc.coll, e.code()) || size <= 1) return error;
        // This rank detected the failure: revoke the communicator everywhere once opFailed has
        // diagnosed it (publishRevoke). Its own errors keep their diagnosis; later ones say it
        // was revoked.
        revokedWhy = "rank " + std::to_string(rank) + " after " + e.what();
        revoked.store(true);
        revokePending = true;
        return error;
      }
      why = revokedWhy;
    }
    if (e.code() != ErrorCode::Aborted) return error;
    return std::make_exception_ptr(
        Error(ErrorCode::PeerLost,
              where(op.args.coll) + ": communicator " + id + " was revoked by " + why));
  } catch (...) {
    return error;
  }
}

int Comm::Impl::firstPeerLeft() const {
  for (int p = 0; p < size; ++p)
    if (p != rank && transport->peerLeft(p)) return p;
  return -1;
}

std::string Comm::Impl::goneText() {
  if (!liveness) return {};
  std::string out;
  try {
    for (int q = 0; q < size; ++q)
      // Gone without a word: no diagnosis report (a rank that failed first publishes one
      // before it goes, and the diagnosis then waits for it as usual).
      if (q != rank && present(liveness->writes(), "dead/" + std::to_string(q)) &&
          !present(liveness->writes(), "diag/" + std::to_string(q)))
        out += (out.empty() ? "" : ", ") + std::to_string(q);
  } catch (const std::exception&) {
    return {};
  }
  if (out.empty()) return {};
  return " (gone: rank " + out +
         ", whose connection to the store closed: the process exited, was killed, or destroyed "
         "the communicator)";
}

void Comm::Impl::publishRevoke(const std::string& message) {
  std::string why;
  {
    std::lock_guard<std::mutex> lk(revokedMu);
    if (!revokePending) return;
    revokePending = false;
    revokedWhy = "rank " + std::to_string(rank) + " after " + message;
    why = revokedWhy;
  }
  if (liveness) liveness->publishRevoke(why, false);
}

void Comm::revoke() {
  Impl& I = *impl_;
  const std::string why = "rank " + std::to_string(I.rank) + " (Comm::revoke)";
  I.revokeLocal(why);
  if (I.liveness) I.liveness->publishRevoke(why, false);
}

// The agreement (docs/reliability.md, "Shrink"). Round n of a communicator:
//  1. every live rank writes shrink/n/in/<r>;
//  2. the decider is the lowest rank of the pool that is not gone: every rank scans the pool in
//     order and, for rank k, waits until decision/k exists (adopt it) or dead/k exists (then,
//     looking at decision/k once more, since k may have written it just before it died: adopt
//     it if it is there, else go on to the next rank: k can never write it now). A rank that
//     reaches itself decides: it waits until every other rank of the pool is in or dead (or the
//     timeout passes: the ranks not in by then are left out), writes decision/<self> and
//     adopts it. Every rank thus adopts the decision of the same rank k, written once.
//  3. every member creates the new communicator and writes ok or fail; each waits until every
//     member wrote ok (done), or one wrote fail or is dead without ok (every member sees the
//     same, as ok/fail are written once before dead): then round n+1 runs with the members.
std::unique_ptr<Comm> Comm::shrink() {
  Impl& I = *impl_;
  const std::string self = "shrink on rank " + std::to_string(I.rank) + " of communicator " + I.id;
  const auto bound = opBound(I);
  const auto start = SteadyClock::now();
  // The decider waits `bound` for the others; the others wait for the decision twice as long
  // (the decider may have started later, and may wait its whole bound for a slow rank).
  auto deadline = start + bound;
  auto decisionDeadline = start + 2 * bound;
  const auto timedOut = [&](const std::string& what) {
    return Error(ErrorCode::Timeout,
                 self + ": " + what + " within " + std::to_string(bound.count()) + " ms");
  };
  if (I.shrinkPool.empty())
    for (int r = 0; r < I.size; ++r) I.shrinkPool.push_back(r);
  if (I.size == 1 || !I.liveness) {
    const int round = I.shrinkAttempt++;
    const int one[] = {0};
    return std::unique_ptr<Comm>(
        new Comm(Impl::make(I.store, I.storeServer, 0, 1, I.id + "/k" + std::to_string(round),
                            I.opts, &I.topo, one, &I.model->params())));
  }
  // Every pending and later operation on every rank fails now; the others come here too.
  const std::string why = "rank " + std::to_string(I.rank) + " (Comm::shrink)";
  I.revokeLocal(why);
  I.liveness->publishRevoke(why, true);
  Store& rd = *I.commStore;
  // Published on a thread earlier, which may have failed: the others must learn of it.
  if (!present(rd, "revoked")) rd.setString("revoked", why);

  Store& wr = I.liveness->writes();
  const auto gone = [&](int q) { return present(rd, "dead/" + std::to_string(q)); };
  for (;;) {
    std::vector<int>& pool = I.shrinkPool;
    if (std::find(pool.begin(), pool.end(), I.rank) == pool.end())
      throw Error(ErrorCode::PeerLost, self + ": this rank was left out of an earlier round");
    const int round = I.shrinkAttempt++;
    const std::string ns = "shrink/" + std::to_string(round) + "/";
    wr.setString(ns + "in/" + std::to_string(I.rank), "1");

    // 2. Find (or make) the decision.
    std::vector<int> members;
    bool decided = false;
    for (int k : pool) {
      const std::string dkey = ns + "decision/" + std::to_string(k);
      for (;;) {
        if (present(rd, dkey)) {
          members = parseRanks(value(rd, dkey));
          decided = true;
          break;
        }
        if (k == I.rank) {
          // Decide: every other rank of the pool is in or gone, or the time is up.
          for (;;) {
            members.clear();
            bool waiting = false;
            for (int q : pool) {
              if (q == I.rank) {
                members.push_back(q);
              } else if (!gone(q)) {
                if (present(rd, ns + "in/" + std::to_string(q)))
                  members.push_back(q);
                else
                  waiting = true;
              }
            }
            if (!waiting || SteadyClock::now() >= deadline) {
              if (waiting)
                for (int q : pool)
                  if (q != I.rank && !gone(q) && !present(rd, ns + "in/" + std::to_string(q)))
                    I.log(1, "shrink round " + std::to_string(round) + ": rank " +
                                 std::to_string(q) + " neither took part nor left within " +
                                 std::to_string(bound.count()) + " ms: left out");
              break;
            }
            pause();
          }
          wr.setString(dkey, joinRanks(members));
          I.log(2, "shrink round " + std::to_string(round) + ": rank " + std::to_string(I.rank) +
                       " decided members [" + joinRanks(members) + "] of " +
                       std::to_string(I.size));
          decided = true;
          break;
        }
        if (gone(k)) {
          // k wrote nothing after its dead key appeared: look at its decision once more.
          if (present(rd, dkey)) {
            members = parseRanks(value(rd, dkey));
            decided = true;
          }
          break;
        }
        if (SteadyClock::now() >= decisionDeadline)
          throw timedOut("rank " + std::to_string(k) + " (which decides round " +
                         std::to_string(round) + ") neither decided nor left");
        pause();
      }
      if (decided) break;
    }
    if (!decided) throw Error(ErrorCode::Internal, self + ": no rank of the pool decided");
    const auto at = std::find(members.begin(), members.end(), I.rank);
    if (at == members.end()) {
      pool = members;
      throw Error(ErrorCode::PeerLost,
                  self + ": this rank was left out (it reached the shrink after the others' " +
                      std::to_string(bound.count()) + " ms timeout, or was found gone); members [" +
                      joinRanks(members) + "]");
    }

    // 3. Create the new communicator; every member learns whether every member did.
    const auto createDeadline = SteadyClock::now() + std::max(bound, I.opts.connectTimeout) + bound;
    std::unique_ptr<Impl> next;
    std::string failure;
    try {
      next = Impl::make(I.store, I.storeServer, static_cast<int>(at - members.begin()),
                        static_cast<int>(members.size()), I.id + "/k" + std::to_string(round),
                        I.opts, &I.topo, members, &I.model->params());
    } catch (const Error& e) {
      failure = e.what();
    }
    wr.setString(ns + (next ? "ok/" : "fail/") + std::to_string(I.rank), failure);
    bool allOk = true;
    for (int q : members) {
      const std::string ok = ns + "ok/" + std::to_string(q);
      const std::string fail = ns + "fail/" + std::to_string(q);
      for (;;) {
        if (present(rd, ok)) break;
        if (present(rd, fail) || (gone(q) && !present(rd, ok))) {
          allOk = false;
          break;
        }
        if (SteadyClock::now() >= createDeadline)
          throw timedOut("rank " + std::to_string(q) + " did not say whether it created round " +
                         std::to_string(round) + "'s communicator");
        pause();
      }
      if (!allOk) break;
    }
    if (allOk) {
      I.log(2, "shrunk communicator " + I.id + " from " + std::to_string(I.size) + " to " +
                   std::to_string(members.size()) + " ranks (members [" + joinRanks(members) +
                   "]) in " +
                   std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                                      SteadyClock::now() - start)
                                      .count()) +
                   " ms");
      return std::unique_ptr<Comm>(new Comm(std::move(next)));
    }
    next.reset();
    pool = members;
    deadline = SteadyClock::now() + bound;  // the next round's
    decisionDeadline = deadline + bound;
  }
}

std::unique_ptr<Comm> Comm::grow(int count) {
  Impl& I = *impl_;
  const std::string self = "grow on rank " + std::to_string(I.rank) + " of communicator " + I.id;
  if (count < 1)
    throw Error(ErrorCode::InvalidArgument,
                self + ": argument 'count' = " + std::to_string(count) + " must be at least 1");
  if (I.revoked.load())
    throw Error(ErrorCode::InvalidArgument,
                self + ": the communicator is revoked (shrink it first, then grow the result)");
  const int seq = ++I.growSeq;
  const std::string id = I.id + "/g" + std::to_string(seq);
  const int newSize = I.size + count;
  if (I.rank == 0) {
    // Grants the next `count` tickets (newcomers take them in the order they arrive).
    const std::int64_t base = I.store->add("braid/grow/granted", count) - count;
    for (int i = 0; i < count; ++i)
      I.store->setString("braid/grow/ticket/" + std::to_string(base + 1 + i),
                         id + " " + std::to_string(I.size + i) + " " + std::to_string(newSize));
  }
  Options o = I.opts;
  o.connectTimeout = std::min(o.connectTimeout, opBound(I));
  auto next = Impl::make(I.store, I.storeServer, I.rank, newSize, id, o, nullptr, {}, nullptr);
  next->opts = I.opts;
  I.log(2, "grew communicator " + I.id + " from " + std::to_string(I.size) + " to " +
               std::to_string(newSize) + " ranks (" + id + ")");
  return std::unique_ptr<Comm>(new Comm(std::move(next)));
}

std::unique_ptr<Comm> Comm::join(std::shared_ptr<Store> store, const Options& options,
                                 std::chrono::milliseconds timeout) {
  if (store == nullptr) throw Error(ErrorCode::InvalidArgument, "Comm::join: store is null");
  const std::int64_t ticket = store->add("braid/grow/tickets", 1);
  std::string grant;
  try {
    grant = store->getString("braid/grow/ticket/" + std::to_string(ticket), timeout);
  } catch (const Error& e) {
    if (e.code() != ErrorCode::Timeout) throw;
    throw Error(ErrorCode::Timeout, "Comm::join (ticket " + std::to_string(ticket) +
                                        "): no communicator grew within " +
                                        std::to_string(timeout.count()) + " ms");
  }
  const auto sp1 = grant.find(' ');
  const auto sp2 = grant.find(' ', sp1 + 1);
  if (sp1 == std::string::npos || sp2 == std::string::npos)
    throw Error(ErrorCode::Internal, "Comm::join: malformed grant '" + grant + "'");
  const std::string id = grant.substr(0, sp1);
  const int rank = std::stoi(grant.substr(sp1 + 1, sp2 - sp1 - 1));
  const int size = std::stoi(grant.substr(sp2 + 1));
  return std::unique_ptr<Comm>(new Comm(
      Impl::make(std::move(store), nullptr, rank, size, id, options, nullptr, {}, nullptr)));
}

std::unique_ptr<Comm> Comm::joinFromEnv(const Options& options) {
  const LaunchInfo li = LaunchInfo::fromEnv();
  if (li.storePort == 0)
    throw Error(
        ErrorCode::InvalidArgument,
        "Comm::joinFromEnv: no store address (set BRAID_STORE=HOST:PORT of the job's store)");
  auto store = std::make_shared<TcpStore>(li.storeHost, li.storePort, options.connectTimeout,
                                          TcpStore::kDefaultOpTimeout, options.security);
  return join(std::move(store), options, options.connectTimeout);
}

}  // namespace braid
