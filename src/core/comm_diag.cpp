// The communicator's diagnosis: every operation passes through opIssued -> [opQueued when it
// goes through the queue] -> opStarted -> opDone /
// opFailed, which feed the flight recorder and the timeline; the first error that fails the
// communicator is diagnosed through the store (core/diagnosis.hpp) and dumps the recorder.
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <braid/comm.hpp>
#include <cstdio>

#include "common/fd.hpp"
#include "core/comm_impl.hpp"
#include "core/signal_dump.hpp"
#include "core/tag.hpp"

namespace braid {

using namespace std::chrono_literals;

void Comm::Impl::startDiagnosis() {
  timespec res{};
  if (::clock_getres(CLOCK_MONOTONIC_COARSE, &res) != 0) res.tv_nsec = 10'000'000;
  coarseSlack = std::chrono::seconds(res.tv_sec) + std::chrono::nanoseconds(res.tv_nsec);
  recorder = std::make_unique<core::FlightRecorder>(opts.flightRecorderOps, origin);
  if (!opts.timeline.empty())
    timeline = std::make_unique<core::Timeline>(core::Timeline::expandPath(opts.timeline, rank, id),
                                                rank, id, origin);
  transport->setMismatchObserver([this](int peer, std::uint64_t expected, std::uint64_t received) {
    std::lock_guard<std::mutex> lk(mismatchSeen.mu);
    if (mismatchSeen.seen) return;
    mismatchSeen.seen = true;
    mismatchSeen.peer = peer;
    mismatchSeen.expected = expected;
    mismatchSeen.received = received;
  });
  if (size > 1 && (opts.diagStall.count() > 0 || opts.diagGrace.count() > 0))
    monitor = std::make_unique<core::DiagMonitor>(
        commStore, rank, size, opts.diagStall, [rec = recorder.get()] { return rec->position(); },
        [this](const core::RankReport& peer, const core::OpDesc& mine) {
          {
            std::lock_guard<std::mutex> lk(stallMismatch.mu);
            if (stallMismatch.seen) return;
            stallMismatch.seen = true;
            stallMismatch.peer = peer;
            stallMismatch.mine = mine;
          }
          // Ends the stalled operation (Error(Aborted)), which opFailed turns into the Mismatch.
          transport->abort("communicator " + id + " on rank " + std::to_string(rank) + ": rank " +
                           std::to_string(peer.rank) + " called " + core::callText(peer.at) +
                           " at op #" + std::to_string(mine.seq));
        });
  startObservability();
  if (opts.flightSignal) {
    signalRegistered = core::registerSignalDump(
        this, [](void* self) { static_cast<Impl*>(self)->dumpFlightRecorder("SIGUSR1"); });
    if (!signalRegistered)
      log(2, "SIGUSR1 has a handler of the application: flight recorder dumps on SIGUSR1 are off");
  }
}

void Comm::Impl::stopDiagnosis() {
  if (signalRegistered) core::unregisterSignalDump(this);
  signalRegistered = false;
}

core::Clock::time_point Comm::Impl::stamp(bool precise) const {
  // steady_clock is CLOCK_MONOTONIC; its coarse variant reads the time of the last tick.
  if (precise) return core::Clock::now();
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return core::Clock::time_point(std::chrono::seconds(ts.tv_sec) +
                                 std::chrono::nanoseconds(ts.tv_nsec));
}

void Comm::Impl::opIssued(Op& op) {
  const std::int64_t t = opTimeoutMs.load(std::memory_order_relaxed);
  op.timeout = t >= 0 ? std::chrono::milliseconds(t) : opts.execTimeout;
  op.precise = timeline != nullptr ||
               (preciseEvery != 0 && !core::isPointToPoint(op.desc.coll) &&
                (preciseMask != 0 || preciseEvery == 1 ? (op.desc.seq & preciseMask)
                                                       : op.desc.seq % preciseEvery) == 0);
  op.issuedAt = stamp(op.precise);
}

void Comm::Impl::opQueued(Op& op) {
  if (op.serial == 0) op.serial = recorder->issued(op.desc, op.bytes, op.issuedAt);
}

void Comm::Impl::opStarted(Op& op, const char* algorithm) {
  // A blocking operation running inline starts right after it was issued: reuse that time stamp
  // instead of taking another one, and record issue and start at once.
  op.algorithm = algorithm;
  if (op.serial == 0) {
    op.startedAt = op.issuedAt;
    op.serial = recorder->begin(op.desc, op.bytes, algorithm, op.startedAt);
    return;
  }
  op.startedAt = op.work == nullptr ? op.issuedAt : stamp(op.precise);
  recorder->started(op.serial, op.desc, algorithm, op.startedAt);
}

void Comm::Impl::opDone(Op& op) {
  const auto now = stamp(op.precise);
  recorder->finished(op.serial, op.desc, nullptr, now);
  if (metrics && (op.precise || !opCounters.count(op.desc.coll, op.algorithm, op.bytes)))
    metrics->opDone(op.desc.coll, op.algorithm, op.bytes,  // a duration where stamps are precise
                    op.precise ? std::chrono::nanoseconds(now - op.startedAt).count() : -1);
  if (timeline)
    timeline->record(op.desc, op.bytes, op.algorithm, core::OpState::Done, op.issuedAt,
                     op.startedAt, now, nullptr);
}

std::exception_ptr Comm::Impl::opFailed(Op& op, std::exception_ptr error) {
  error = elasticFailure(op, error);  // revoke: published, or the error of a revoked comm
  std::exception_ptr out = error;
  std::string message;
  bool dump = false;
  try {
    std::rethrow_exception(error);
  } catch (const Error& e) {
    // The monitor found a peer stalled at this operation in another call and aborted the
    // transport: whatever the operation then failed with (Aborted, or PeerLost when the peer
    // did the same first) is that mismatch.
    std::optional<core::RankReport> stalledPeer;
    if (e.code() != ErrorCode::InvalidArgument) {
      std::lock_guard<std::mutex> lk(stallMismatch.mu);
      if (stallMismatch.seen && stallMismatch.mine.seq == op.desc.seq &&
          !core::isPointToPoint(op.desc.coll))
        stalledPeer = stallMismatch.peer;
    }
    if (stalledPeer && !failedOnce.exchange(true)) {
      Error better = diagnoseStalledMismatch(op, *stalledPeer);
      out = std::make_exception_ptr(better);
      message = better.what();
      dump = true;
    } else if (core::failsCommunicator(op.desc.coll, e.code()) && !failedOnce.exchange(true)) {
      Error better = diagnose(op, e);
      out = std::make_exception_ptr(better);
      message = better.what();
      dump = true;
    } else {
      message = e.what();
    }
  } catch (const std::exception& e) {
    message = e.what();
  } catch (...) {
    message = "unknown exception";
  }
  const auto now = stamp(op.precise);
  opQueued(op);  // failed before it started inline (e.g. selection): recorded as issued first
  recorder->finished(op.serial, op.desc, message.c_str(), now);
  if (metrics) {
    ErrorCode code = ErrorCode::Internal;
    try {
      std::rethrow_exception(out);
    } catch (const Error& e) {
      code = e.code();
    } catch (...) {
    }
    metrics->opFailed(op.desc.coll, code);
  }
  if (timeline)
    timeline->record(op.desc, op.bytes, op.algorithm, core::OpState::Failed, op.issuedAt,
                     op.startedAt, now, message.c_str());
  if (dump) {
    if (timeline) timeline->flush();
    dumpFlightRecorder("operation failed: " + message);
  }
  publishRevoke(message);  // after the diagnosis, which sees the others as they were
  return out;
}

Error Comm::Impl::diagnose(const Op& op, const Error& error) {
  const ErrorCode code = error.code();
  const bool collective = !core::isPointToPoint(op.desc.coll);
  Impl::MismatchSeen seen;
  {
    std::lock_guard<std::mutex> lk(mismatchSeen.mu);
    seen.seen = mismatchSeen.seen;
    seen.peer = mismatchSeen.peer;
    seen.expected = mismatchSeen.expected;
    seen.received = mismatchSeen.received;
  }
  const bool mismatch =
      code == ErrorCode::Mismatch && seen.seen && collective && !core::decodeTag(seen.received).p2p;
  // This rank's own operation at the mismatch: the one whose tag it expected.
  core::OpDesc mine = op.desc;
  if (mismatch) {
    const std::uint64_t seq = core::nearestSeq(core::decodeTag(seen.expected).seqLow, op.desc.seq);
    if (seq != mine.seq)
      for (const core::OpDesc& d : recorder->recentCollectives(recorder->capacity()))
        if (d.seq == seq) mine = d;
  }
  const auto why =
      "communicator " + id + " failed on rank " + std::to_string(rank) + ": " + error.detail();
  if (monitor == nullptr || opts.diagGrace.count() == 0) {
    transport->abort(why);
    return error;
  }
  core::RankReport me;
  me.rank = rank;
  me.failed = true;
  me.error = toString(code);
  const auto pos = recorder->position();
  me.any = pos.any;
  me.at = pos.desc;
  me.state = core::OpState::Failed;
  me.mismatch = mismatch;
  me.mismatchPeer = seen.peer;
  me.receivedTag = seen.received;
  me.mismatchMine = mine;
  me.recent = recorder->recentCollectives(16);
  if (code == ErrorCode::PeerLost) me.lostPeer = firstPeerLeft();
  if (!me.any && collective) {
    me.any = true;
    me.at = op.desc;
  }
  const auto grace = opts.diagGrace;
  monitor->publish(me, grace);
  // Fail the whole transport now (after publishing, so peers find the report), so that every
  // peer, not only the one whose connection broke, fails promptly and reports too instead of
  // waiting for its own timeout.
  transport->abort(why);

  if (code == ErrorCode::Timeout && collective) {
    const int self = rank;
    core::Reports reports = monitor->collect(
        [self](const core::Reports& rs) {
          for (std::size_t r = 0; r < rs.size(); ++r)
            if (static_cast<int>(r) != self && !rs[r]) return false;
          return true;
        },
        grace);
    return Error(
        ErrorCode::Timeout,
        core::timeoutMessage(op.desc, rank, size, op.timeout, reports) + "; " + error.detail());
  }
  if (mismatch) {
    const int peer = seen.peer;
    core::Reports reports = monitor->collect(
        [peer](const core::Reports& rs) {
          const auto& p = rs[static_cast<std::size_t>(peer)];
          return p && p->failed;
        },
        grace);
    std::uint64_t peerSeq = 0;
    const std::string peerCall = core::peerCallText(
        seen.received, mine.seq, reports[static_cast<std::size_t>(seen.peer)], &peerSeq);
    return Error(ErrorCode::Mismatch,
                 core::mismatchMessage(seen.peer, peerCall, peerSeq, rank, mine, id));
  }
  if (code == ErrorCode::PeerLost) {
    // A rank the store knows is gone (its process died) is the cause: no report to wait for.
    if (const std::string gone = goneText(); !gone.empty())
      return Error(ErrorCode::PeerLost, error.detail() + gone);
    // A peer that left this communicator (destroyed or aborted it, and said so over the shared
    // connections) is the cause too, unless it aborted because its own operation failed first
    // on finding another rank gone: then its report, published before it aborted, names that
    // rank. (Read for a short while only: a peer that left by its user's call publishes none.)
    if (const int p = firstPeerLeft(); p >= 0) {
      const auto at = static_cast<std::size_t>(p);
      const core::Reports now = monitor->collect(
          [at](const core::Reports& rs) { return at < rs.size() && rs[at].has_value(); },
          std::min<std::chrono::milliseconds>(grace, 200ms));
      if (at < now.size() && now[at] && now[at]->failed && now[at]->lostPeer >= 0 &&
          now[at]->lostPeer != rank && now[at]->lostPeer != p)
        return Error(ErrorCode::PeerLost, error.detail() + " (rank " + std::to_string(p) +
                                              "'s communicator had failed first, on finding rank " +
                                              std::to_string(now[at]->lostPeer) + " gone)");
      return error;
    }
    const int self = rank;
    auto rootCause = [self](const core::RankReport& r) {
      return r.failed && ((r.mismatch && r.mismatchPeer == self) || r.error != "PeerLost");
    };
    core::Reports reports = monitor->collect(
        [&](const core::Reports& rs) {
          for (const auto& r : rs)
            if (r && rootCause(*r)) return true;
          return false;
        },
        std::min<std::chrono::milliseconds>(grace, 1000ms));
    for (const auto& r : reports) {
      if (!r || !r->failed || !r->mismatch || r->mismatchPeer != rank) continue;
      // The peer found this rank's message in its own operation: say it from this side.
      core::OpDesc ours = op.desc;
      const std::uint64_t seq =
          core::nearestSeq(core::decodeTag(r->receivedTag).seqLow, op.desc.seq);
      if (seq != ours.seq)
        for (const core::OpDesc& d : recorder->recentCollectives(recorder->capacity()))
          if (d.seq == seq) ours = d;
      return Error(ErrorCode::Mismatch,
                   core::mismatchMessage(r->rank, core::callText(r->mismatchMine),
                                         r->mismatchMine.seq, rank, ours, id));
    }
    for (const auto& r : reports) {
      if (!r || !rootCause(*r)) continue;
      std::string cause = "rank " + std::to_string(r->rank) + " failed first: " + r->error;
      if (r->any) cause += " in op #" + std::to_string(r->at.seq) + " " + toString(r->at.coll);
      return Error(ErrorCode::PeerLost, error.detail() + " (" + cause + ")");
    }
  }
  return error;
}

Error Comm::Impl::diagnoseStalledMismatch(const Op& op, const core::RankReport& peer) {
  core::RankReport me;
  me.rank = rank;
  me.failed = true;
  me.error = toString(ErrorCode::Mismatch);
  me.any = true;
  me.at = op.desc;
  me.state = core::OpState::Failed;
  me.mismatch = true;
  me.mismatchPeer = peer.rank;
  // The tag the peer's messages carry, so that it finds its own call by sequence number.
  me.receivedTag = core::collectiveTag(peer.at.coll, peer.at.dtype, peer.at.op, peer.at.root,
                                       peer.at.seq, peer.at.countKey, commHash);
  me.mismatchMine = op.desc;
  me.recent = recorder->recentCollectives(16);
  if (monitor != nullptr) monitor->publish(me, opts.diagGrace);
  return Error(ErrorCode::Mismatch, core::mismatchMessage(peer.rank, core::callText(peer.at),
                                                          peer.at.seq, rank, op.desc, id));
}

void Comm::Impl::dumpFlightRecorder(const std::string& reason) {
  char host[256] = "?";
  ::gethostname(host, sizeof host - 1);
  const std::string title = "rank " + std::to_string(rank) + " of communicator " + id + " (size " +
                            std::to_string(size) + "), host " + host + ", pid " +
                            std::to_string(::getpid()) + ", reason: " + reason;
  const std::string text = recorder->dump(title);
  if (!opts.flightDir.empty()) {
    std::string file = id;
    for (char& ch : file)
      if (ch == '/') ch = '-';
    const std::string path = opts.flightDir + "/braid-flight.comm" + file + ".rank" +
                             std::to_string(rank) + ".pid" + std::to_string(::getpid()) + ".txt";
    if (const Fd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644)); fd) {
      std::size_t done = 0;
      while (done < text.size()) {
        const ssize_t w = ::write(fd.get(), text.data() + done, text.size() - done);
        if (w <= 0) break;
        done += static_cast<std::size_t>(w);
      }
      if (opts.logLevel >= 1)
        std::fprintf(stderr, "[braid rank %d comm %s] flight recorder dumped to %s\n", rank,
                     id.c_str(), path.c_str());
      return;
    }
    std::fprintf(stderr, "[braid rank %d comm %s] cannot write %s; flight recorder follows\n", rank,
                 id.c_str(), path.c_str());
  } else if (opts.logLevel == 0 && reason != "SIGUSR1") {
    return;  // BRAID_DEBUG=NONE: only an explicit request prints
  }
  std::fwrite(text.data(), 1, text.size(), stderr);
  std::fflush(stderr);
}

}  // namespace braid
