#include "core/timeline.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <braid/error.hpp>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>

namespace braid::core {
namespace {

// Appends s to out as the inside of a JSON string.
void jsonEscape(std::string& out, const char* s) {
  for (; *s != '\0'; ++s) {
    const unsigned char ch = static_cast<unsigned char>(*s);
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += static_cast<char>(ch);
    } else if (ch < 0x20) {
      char esc[8];
      std::snprintf(esc, sizeof esc, "\\u%04x", ch);
      out += esc;
    } else {
      out += static_cast<char>(ch);
    }
  }
}

std::string sanitizedId(const std::string& id) {
  std::string s = id;
  for (char& ch : s)
    if (ch == '/') ch = '-';
  return s;
}

}  // namespace

std::string Timeline::expandPath(const std::string& pattern, int rank, const std::string& commId) {
  std::string p = pattern;
  if (p.find("%r") == std::string::npos) {
    std::string insert = (commId == "0" ? std::string() : ".comm%c") + ".rank%r";
    const std::string ext = ".json";
    if (p.size() > ext.size() && p.compare(p.size() - ext.size(), ext.size(), ext) == 0)
      p.insert(p.size() - ext.size(), insert);
    else
      p += insert;
  }
  std::string out;
  for (std::size_t i = 0; i < p.size(); ++i) {
    if (p[i] != '%' || i + 1 == p.size()) {
      out += p[i];
      continue;
    }
    const char k = p[++i];
    if (k == 'r')
      out += std::to_string(rank);
    else if (k == 'c')
      out += sanitizedId(commId);
    else if (k == 'p')
      out += std::to_string(::getpid());
    else if (k == '%')
      out += '%';
    else {
      out += '%';
      out += k;
    }
  }
  return out;
}

Timeline::Timeline(const std::string& path, int rank, const std::string& commId,
                   Clock::time_point origin)
    : rank_(rank), origin_(origin) {
  fd_.reset(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!fd_)
    throw Error(ErrorCode::InvalidArgument, "BRAID_TIMELINE: cannot create '" + path +
                                                "' on rank " + std::to_string(rank) + ": " +
                                                std::strerror(errno));
  originWallMicros_ =
      std::chrono::duration<double, std::micro>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  buffer_.reserve(kBufferBytes);
  char line[512];
  std::string name;
  jsonEscape(name, commId.c_str());
  int n = std::snprintf(line, sizeof line,
                        "[\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,"
                        "\"args\":{\"name\":\"braid rank %d (communicator %s)\"}}",
                        rank, rank, name.c_str());
  append(line, static_cast<std::size_t>(n));
  first_ = false;
}

Timeline::~Timeline() {
  std::lock_guard<std::mutex> lk(mu_);
  static constexpr char kEnd[] = "\n]\n";
  append(kEnd, sizeof kEnd - 1);
  flush();
}

double Timeline::micros(Clock::time_point t) const {
  return originWallMicros_ + std::chrono::duration<double, std::micro>(t - origin_).count();
}

void Timeline::append(const char* text, std::size_t n) {
  if (buffer_.size() + n > kBufferBytes / 2) flush();
  buffer_.append(text, n);
}

void Timeline::flush() {
  std::size_t done = 0;
  while (done < buffer_.size()) {
    const ssize_t w = ::write(fd_.get(), buffer_.data() + done, buffer_.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) break;  // a full disk loses timeline events, never the operation
    done += static_cast<std::size_t>(w);
  }
  buffer_.clear();
}

void Timeline::straggler(std::uint64_t seq, Collective coll, int lastRank, std::int64_t lateNs,
                         Clock::time_point at) {
  std::lock_guard<std::mutex> lk(mu_);
  char line[512];
  const int n =
      std::snprintf(line, sizeof line,
                    ",\n{\"name\":\"last: rank %d (+%.1f us)\",\"cat\":\"straggler\",\"ph\":\"i\","
                    "\"s\":\"p\",\"pid\":%d,\"tid\":0,\"ts\":%.3f,\"args\":{\"seq\":%llu,"
                    "\"collective\":\"%s\",\"last_rank\":%d,\"late_us\":%.3f}}",
                    lastRank, static_cast<double>(lateNs) / 1e3, rank_, micros(at),
                    static_cast<unsigned long long>(seq), toString(coll), lastRank,
                    static_cast<double>(lateNs) / 1e3);
  if (n > 0) append(line, static_cast<std::size_t>(std::min<int>(n, sizeof line - 1)));
}

void Timeline::record(const OpDesc& d, std::uint64_t bytes, const char* algorithm, OpState state,
                      Clock::time_point issued, Clock::time_point started,
                      Clock::time_point finished, const char* error) {
  std::lock_guard<std::mutex> lk(mu_);
  int lane = kLanes - 1;  // overflow lane: may overlap when more than kLanes ops overlap
  for (int l = 0; l < kLanes; ++l) {
    if (laneBusyUntil_[static_cast<std::size_t>(l)] <= issued) {
      lane = l;
      break;
    }
  }
  laneBusyUntil_[static_cast<std::size_t>(lane)] = finished;
  char line[1024];
  int n;
  if (!laneNamed_[static_cast<std::size_t>(lane)]) {
    laneNamed_[static_cast<std::size_t>(lane)] = true;
    n = std::snprintf(line, sizeof line,
                      ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,"
                      "\"args\":{\"name\":\"operations (lane %d)\"}}",
                      rank_, lane, lane);
    append(line, static_cast<std::size_t>(n));
  }
  std::string name = isPointToPoint(d.coll)
                         ? std::string(toString(d.coll)) + " rank " + std::to_string(d.peer)
                         : std::string(toString(d.coll)) + " #" + std::to_string(d.seq);
  std::string call;
  jsonEscape(call, callText(d, true).c_str());
  std::string err;
  if (error != nullptr) jsonEscape(err, error);
  const char* algo = algorithm != nullptr ? algorithm : "-";
  const double tIssued = micros(issued), tFinished = micros(finished);
  n = std::snprintf(line, sizeof line,
                    ",\n{\"name\":\"%s\",\"cat\":\"op\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,"
                    "\"pid\":%d,\"tid\":%d,\"args\":{\"call\":\"%s\",\"seq\":%" PRIu64
                    ",\"bytes\":%" PRIu64 ",\"algorithm\":\"%s\",\"state\":\"%s\"",
                    name.c_str(), tIssued, tFinished - tIssued, rank_, lane, call.c_str(), d.seq,
                    bytes, algo, toString(state));
  append(line, static_cast<std::size_t>(std::min<int>(n, sizeof line - 1)));
  if (error != nullptr) {
    std::string e = ",\"error\":\"" + err + "\"";
    append(e.data(), e.size());
  }
  append("}}", 2);
  const bool ran = started != Clock::time_point{};
  const double tStarted = ran ? micros(started) : tFinished;
  n = std::snprintf(line, sizeof line,
                    ",\n{\"name\":\"queued\",\"cat\":\"phase\",\"ph\":\"X\",\"ts\":%.3f,"
                    "\"dur\":%.3f,\"pid\":%d,\"tid\":%d}",
                    tIssued, tStarted - tIssued, rank_, lane);
  append(line, static_cast<std::size_t>(n));
  if (ran) {
    n = std::snprintf(line, sizeof line,
                      ",\n{\"name\":\"running\",\"cat\":\"phase\",\"ph\":\"X\",\"ts\":%.3f,"
                      "\"dur\":%.3f,\"pid\":%d,\"tid\":%d,\"args\":{\"algorithm\":\"%s\","
                      "\"bytes\":%" PRIu64 "}}",
                      tStarted, tFinished - tStarted, rank_, lane, algo, bytes);
    append(line, static_cast<std::size_t>(n));
  }
}

}  // namespace braid::core
