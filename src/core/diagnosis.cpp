#include "core/diagnosis.hpp"

#include <cinttypes>
#include <cstdio>
#include <sstream>

#include "core/tag.hpp"

namespace braid::core {
namespace {

using namespace std::chrono_literals;

void putDesc(std::ostringstream& o, const OpDesc& d) {
  o << ' ' << static_cast<int>(d.coll) << ' ' << static_cast<int>(d.dtype) << ' '
    << static_cast<int>(d.op) << ' ' << d.root << ' ' << d.peer << ' ' << d.userTag << ' '
    << d.count << ' ' << d.countKey << ' ' << d.seq;
}

bool getDesc(std::istringstream& in, OpDesc& d) {
  int c = 0, t = 0, op = 0;
  if (!(in >> c >> t >> op >> d.root >> d.peer >> d.userTag >> d.count >> d.countKey >> d.seq))
    return false;
  if (c < 0 || c > static_cast<int>(Collective::Recv) || t < 0 || t >= kNumDataTypes || op < 0 ||
      op >= kNumReduceOps)
    return false;
  d.coll = static_cast<Collective>(c);
  d.dtype = static_cast<DataType>(t);
  d.op = static_cast<ReduceOp>(op);
  return true;
}

std::string rankList(const std::vector<int>& ranks) {
  std::string s;
  for (std::size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s;
}

}  // namespace

std::string encodeReport(const RankReport& r) {
  std::ostringstream o;
  o << "braid-diag 1\nrank " << r.rank << "\nfailed " << (r.failed ? 1 : 0) << "\nerror "
    << (r.error.empty() ? "-" : r.error) << "\n";
  if (r.any) {
    o << "at";
    putDesc(o, r.at);
    o << ' ' << static_cast<int>(r.state) << ' ' << r.forMs << "\n";
  }
  if (r.mismatch) {
    o << "mismatch " << r.mismatchPeer << ' ' << r.receivedTag;
    putDesc(o, r.mismatchMine);
    o << "\n";
  }
  if (r.lostPeer >= 0) o << "lost " << r.lostPeer << "\n";
  for (const OpDesc& d : r.recent) {
    o << "recent";
    putDesc(o, d);
    o << "\n";
  }
  return o.str();
}

std::optional<RankReport> decodeReport(const std::string& text) {
  std::istringstream lines(text);
  std::string line;
  if (!std::getline(lines, line) || line != "braid-diag 1") return std::nullopt;
  RankReport r;
  while (std::getline(lines, line)) {
    std::istringstream in(line);
    std::string key;
    in >> key;
    if (key == "rank") {
      if (!(in >> r.rank)) return std::nullopt;
    } else if (key == "failed") {
      int f = 0;
      in >> f;
      r.failed = f != 0;
    } else if (key == "error") {
      in >> r.error;
      if (r.error == "-") r.error.clear();
    } else if (key == "at") {
      int s = 0;
      if (!getDesc(in, r.at) || !(in >> s >> r.forMs) || s < 0 || s > 3) return std::nullopt;
      r.state = static_cast<OpState>(s);
      r.any = true;
    } else if (key == "mismatch") {
      if (!(in >> r.mismatchPeer >> r.receivedTag) || !getDesc(in, r.mismatchMine))
        return std::nullopt;
      r.mismatch = true;
    } else if (key == "lost") {
      if (!(in >> r.lostPeer) || r.lostPeer < 0) return std::nullopt;
    } else if (key == "recent") {
      OpDesc d;
      if (!getDesc(in, d)) return std::nullopt;
      r.recent.push_back(d);
    }
  }
  if (r.rank < 0) return std::nullopt;
  return r;
}

std::string timeoutMessage(const OpDesc& op, int rank, int size, std::chrono::milliseconds timeout,
                           const Reports& reports) {
  std::vector<int> notReached;
  std::vector<std::string> details;
  for (int r = 0; r < size; ++r) {
    if (r == rank) continue;
    const auto& rep = static_cast<std::size_t>(r) < reports.size()
                          ? reports[static_cast<std::size_t>(r)]
                          : std::optional<RankReport>();
    if (rep && rep->any && rep->at.seq >= op.seq) continue;
    notReached.push_back(r);
    if (!rep) {
      details.push_back("rank " + std::to_string(r) + " did not report");
    } else if (!rep->any) {
      details.push_back("rank " + std::to_string(r) + " has run no collective yet");
    } else {
      std::string d = "rank " + std::to_string(r) + " is at op #" + std::to_string(rep->at.seq) +
                      " " + toString(rep->at.coll);
      if (rep->failed && !rep->error.empty())
        d += " (failed there: " + rep->error + ")";
      else if (rep->state == OpState::Done || rep->state == OpState::Failed)
        d += std::string(" (") + toString(rep->state) + ")";
      details.push_back(d);
    }
  }
  std::string s = std::string(toString(op.coll)) + " #" + std::to_string(op.seq) +
                  " timed out after " + std::to_string(timeout.count()) + " ms on rank " +
                  std::to_string(rank) + ": ";
  if (notReached.empty()) return s + "every other rank reached it";
  s += notReached.size() == 1 ? "rank " + rankList(notReached) + " has not reached it ("
                              : "ranks " + rankList(notReached) + " have not reached it (";
  for (std::size_t i = 0; i < details.size(); ++i) s += (i ? "; " : "") + details[i];
  return s + ")";
}

std::string peerCallText(std::uint64_t receivedTag, std::uint64_t nearSeq,
                         const std::optional<RankReport>& peerReport, std::uint64_t* seqOut) {
  const TagFields f = decodeTag(receivedTag);
  const std::uint64_t seq = nearestSeq(f.seqLow, nearSeq);
  if (seqOut != nullptr) *seqOut = seq;
  if (peerReport) {
    auto matches = [&](const OpDesc& d) { return !isPointToPoint(d.coll) && d.seq == seq; };
    for (const OpDesc& d : peerReport->recent)
      if (matches(d)) return callText(d);
    if (peerReport->any && matches(peerReport->at)) return callText(peerReport->at);
    if (peerReport->mismatch && matches(peerReport->mismatchMine))
      return callText(peerReport->mismatchMine);
  }
  std::string s = std::string(toString(f.coll)) + "(";
  if (f.coll == Collective::Barrier) return s + ")";
  s += std::string(toString(f.dtype)) + ", count not reported";
  if (hasRoot(f.coll)) s += ", root=" + std::to_string(f.rootLow);
  return s + ")";
}

bool sameCall(const OpDesc& a, const OpDesc& b) {
  return a.coll == b.coll && a.dtype == b.dtype && a.op == b.op && a.root == b.root &&
         a.countKey == b.countKey && a.seq == b.seq;
}

std::string mismatchMessage(int peer, const std::string& peerCall, std::uint64_t peerSeq, int self,
                            const OpDesc& mine, const std::string& commId) {
  std::string theirs = peerCall;
  std::string ours = callText(mine);
  if (theirs == ours) ours = callText(mine, true);  // only the reduction op differs
  std::string s = "rank " + std::to_string(peer) + " called " + theirs;
  if (peerSeq != mine.seq) s += " as its op #" + std::to_string(peerSeq);
  return s + " where rank " + std::to_string(self) + " called " + ours + " at op #" +
         std::to_string(mine.seq) + " of communicator " + commId;
}

// ---------------------------------------------------------------- DiagMonitor

DiagMonitor::DiagMonitor(std::shared_ptr<Store> store, int rank, int size,
                         std::chrono::milliseconds stall, PositionFn position, MismatchFn mismatch)
    : store_(std::move(store)),
      rank_(rank),
      size_(size),
      stall_(stall),
      position_(std::move(position)),
      mismatch_(std::move(mismatch)),
      collected_(static_cast<std::size_t>(size)) {
  thread_ = std::thread([this] { loop(); });
}

DiagMonitor::~DiagMonitor() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

bool DiagMonitor::storeCall(const std::function<void()>& f) {
  if (storeBroken_) return false;
  try {
    f();
    return true;
  } catch (...) {
    storeBroken_ = true;  // a dead or unreachable store: do not wait on it again
    return false;
  }
}

bool DiagMonitor::publish(const RankReport& mine, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lk(mu_);
  if (request_ != Request::None) return false;  // a previous request is stuck in the store
  toPublish_ = mine;
  request_ = Request::Publish;
  requestDone_ = false;
  cv_.notify_all();
  cv_.wait_for(lk, timeout, [&] { return requestDone_; });
  return requestDone_ && publishOk_;
}

Reports DiagMonitor::collect(std::function<bool(const Reports&)> enough,
                             std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lk(mu_);
  if (request_ != Request::None) return collected_;
  enough_ = std::move(enough);
  collectUntil_ = std::chrono::steady_clock::now() + timeout;
  request_ = Request::Collect;
  requestDone_ = false;
  cv_.notify_all();
  // The monitor stops at collectUntil_; the slack covers one store round trip.
  cv_.wait_for(lk, timeout + 300ms, [&] { return requestDone_; });
  return collected_;
}

void DiagMonitor::publishProgress() {
  const FlightRecorder::Position pos = position_();
  if (!pos.any) return;
  const auto now = std::chrono::steady_clock::now();
  const bool running = pos.state == OpState::Running;
  const double forMs =
      running ? std::chrono::duration<double, std::milli>(now - pos.started).count() : 0.0;
  const bool stalled = running && forMs >= static_cast<double>(stall_.count());
  const bool changed =
      progressPublished_ && (pos.desc.seq != publishedSeq_ || pos.state != publishedState_);
  if (!((stalled && !progressPublished_) || changed)) return;
  RankReport r;
  r.rank = rank_;
  r.any = true;
  r.at = pos.desc;
  r.state = pos.state;
  r.forMs = forMs;
  const std::string text = encodeReport(r);
  if (storeCall([&] { store_->setString("diag/" + std::to_string(rank_), text); })) {
    progressPublished_ = true;
    publishedSeq_ = pos.desc.seq;
    publishedState_ = pos.state;
  }
}

void DiagMonitor::compareStalled() {
  if (mismatchFound_ || !progressPublished_) return;
  const FlightRecorder::Position pos = position_();
  const auto now = std::chrono::steady_clock::now();
  if (!pos.any || pos.state != OpState::Running || now - pos.started < stall_) return;
  if (pos.desc.seq != compareSeq_ || !compareStarted_) {
    compareStarted_ = true;
    compareSeq_ = pos.desc.seq;
    compareInterval_ = 500ms;
    nextPeer_ = rank_ + 1;
    lastCompare_ = {};
  }
  if (now - lastCompare_ < compareInterval_) return;
  // Bounded store load in a large hung job: at most kComparePeers records per round, rounds
  // further and further apart while the same operation stays stalled.
  lastCompare_ = now;
  compareInterval_ = std::min<std::chrono::milliseconds>(compareInterval_ * 2, 8000ms);
  constexpr int kComparePeers = 32;
  for (int i = 0; i < std::min(size_ - 1, kComparePeers) && !mismatchFound_; ++i) {
    int r = nextPeer_++ % size_;
    if (r == rank_) r = nextPeer_++ % size_;
    const std::string key = "diag/" + std::to_string(r);
    bool present = false;
    std::string text;
    if (!storeCall([&] { present = store_->check({key}); })) return;
    if (!present) continue;
    if (!storeCall([&] { text = store_->getString(key, 1000ms); })) return;
    const auto rep = decodeReport(text);
    if (!rep || !rep->any || rep->at.seq != pos.desc.seq || isPointToPoint(rep->at.coll) ||
        sameCall(rep->at, pos.desc))
      continue;
    mismatchFound_ = true;
    mismatch_(*rep, pos.desc);
  }
}

void DiagMonitor::loop() {
  const auto period =
      stall_.count() > 0 ? std::clamp<std::chrono::milliseconds>(stall_ / 4, 20ms, 250ms) : 250ms;
  std::unique_lock<std::mutex> lk(mu_);
  while (!stopping_) {
    cv_.wait_for(lk, period, [&] { return stopping_ || request_ != Request::None; });
    if (stopping_) break;
    if (request_ == Request::Publish) {
      const std::string text = encodeReport(toPublish_);
      lk.unlock();
      const bool ok = storeCall([&] { store_->setString("diag/" + std::to_string(rank_), text); });
      lk.lock();
      failedPublished_ = true;
      publishOk_ = ok;
      request_ = Request::None;
      requestDone_ = true;
      cv_.notify_all();
      continue;
    }
    if (request_ == Request::Collect) {
      auto poll = std::chrono::milliseconds(25);
      for (;;) {
        Reports current = collected_;
        lk.unlock();
        for (int r = 0; r < size_; ++r) {
          if (r == rank_) continue;
          auto& slot = current[static_cast<std::size_t>(r)];
          if (slot && slot->failed) continue;  // final
          const std::string key = "diag/" + std::to_string(r);
          std::string text;
          bool present = false;
          if (!storeCall([&] { present = store_->check({key}); })) break;
          if (present && !storeCall([&] { text = store_->getString(key, 1000ms); })) break;
          if (present)
            if (auto rep = decodeReport(text)) slot = std::move(rep);
        }
        lk.lock();
        collected_ = std::move(current);
        if (stopping_ || storeBroken_ || enough_(collected_) ||
            std::chrono::steady_clock::now() >= collectUntil_)
          break;
        cv_.wait_for(lk, poll, [&] { return stopping_; });
        poll = std::min<std::chrono::milliseconds>(poll * 2, 400ms);
      }
      request_ = Request::None;
      requestDone_ = true;
      cv_.notify_all();
      continue;
    }
    if (stall_.count() > 0 && !failedPublished_) {
      lk.unlock();
      publishProgress();
      compareStalled();
      lk.lock();
    }
  }
}

}  // namespace braid::core
