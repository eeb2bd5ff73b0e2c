#include "common/tune_cache.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

namespace braid::machine {
namespace {

constexpr const char* kMagic = "braid-tune-cache 1";

std::string trim(std::string s) {
  const auto b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  const auto e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

// One line of the file's text: no newlines inside a field.
std::string oneLine(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  return trim(std::move(s));
}

bool parseValue(const std::string& text, std::uint64_t& out) {
  if (text == "never") {
    out = kTuneNever;
    return true;
  }
  if (text.empty() || text.size() > 19) return false;
  for (char c : text)
    if (c < '0' || c > '9') return false;
  out = std::strtoull(text.c_str(), nullptr, 10);
  return true;
}

bool plausibleDate(const std::string& d) {
  // YYYY-MM-DDTHH:MM:SSZ
  if (d.size() != 20 || d[4] != '-' || d[7] != '-' || d[10] != 'T' || d[13] != ':' ||
      d[16] != ':' || d[19] != 'Z')
    return false;
  for (std::size_t i : {0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18})
    if (d[i] < '0' || d[i] > '9') return false;
  return true;
}

std::string keyText(const TuneKey& k) {
  return "'" + k.cpuModel + "'" + (k.cpuId.empty() ? "" : " (" + k.cpuId + ")") + ", " + k.isa +
         ", " + std::to_string(k.cpus) + " CPUs";
}

}  // namespace

TuneKey thisMachine(std::string isa, const std::string& cpuinfo) {
  TuneKey k;
  k.isa = std::move(isa);
  std::ifstream in(cpuinfo);
  std::string line;
  // The first CPU's block (up to the first blank line after it began).
  std::map<std::string, std::string> first;
  while (std::getline(in, line)) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) {
      if (!first.empty() && trim(line).empty()) break;
      continue;
    }
    first.emplace(trim(line.substr(0, colon)), oneLine(line.substr(colon + 1)));
  }
  // x86: "model name : AMD EPYC"; arm64 has no model name, only "CPU part".
  for (const char* name : {"model name", "CPU part"}) {
    if (auto it = first.find(name); it != first.end() && !it->second.empty()) {
      k.cpuModel = it->second;
      break;
    }
  }
  if (k.cpuModel.empty()) k.cpuModel = "unknown";
  const std::pair<const char*, const char*> identity[] = {
      {"vendor_id", ""},         {"cpu family", "family "},           {"model", "model "},
      {"stepping", "stepping "}, {"CPU implementer", "implementer "}, {"CPU variant", "variant "},
      {"CPU part", "part "},     {"CPU revision", "revision "}};
  for (const auto& [name, label] : identity) {
    if (auto it = first.find(name); it != first.end() && !it->second.empty())
      k.cpuId += (k.cpuId.empty() ? "" : " ") + std::string(label) + it->second;
  }
  const long n = ::sysconf(_SC_NPROCESSORS_ONLN);
  k.cpus = n > 0 ? static_cast<int>(n) : 1;
  return k;
}

std::string tuneCachePath(const std::string& setting) {
  if (setting == "off") return "";
  if (!setting.empty()) return setting;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x != nullptr && x[0] == '/')
    return std::string(x) + "/braid/machine.tune";
  if (const char* h = std::getenv("HOME"); h != nullptr && h[0] == '/')
    return std::string(h) + "/.cache/braid/machine.tune";
  return "";
}

TuneCache readTuneCache(const std::string& path, const TuneKey& key) {
  TuneCache c;
  c.path = path;
  if (path.empty()) return c;
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    c.state = TuneCache::State::Missing;
    return c;
  }
  std::ifstream in(path);
  if (!in) {
    c.state = TuneCache::State::Corrupt;
    c.problem = std::string("unreadable: ") + std::strerror(errno);
    return c;
  }
  auto corrupt = [&](int lineNo, const std::string& why) {
    c.state = TuneCache::State::Corrupt;
    c.problem = "line " + std::to_string(lineNo) + ": " + why;
    c.entries.clear();
    return c;
  };
  std::string line;
  int lineNo = 0;
  bool magic = false, cpu = false, isa = false, cpus = false;
  std::map<std::string, TuneEntry> entries;
  while (std::getline(in, line)) {
    ++lineNo;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (trim(line).empty() || line[0] == '#') continue;
    if (!magic) {
      if (line != kMagic) return corrupt(lineNo, "expected '" + std::string(kMagic) + "'");
      magic = true;
      continue;
    }
    const auto sp = line.find(' ');
    const std::string word = line.substr(0, sp);
    const std::string rest = sp == std::string::npos ? "" : line.substr(sp + 1);
    if (word == "cpu") {
      c.key.cpuModel = rest;
      cpu = true;
    } else if (word == "cpuid") {
      c.key.cpuId = rest;  // absent in files of braid before it: another machine, measured over
    } else if (word == "isa") {
      c.key.isa = rest;
      isa = true;
    } else if (word == "cpus") {
      std::uint64_t v = 0;
      if (!parseValue(rest, v) || v == 0 || v > (1u << 20))
        return corrupt(lineNo, "bad CPU count '" + rest + "'");
      c.key.cpus = static_cast<int>(v);
      cpus = true;
    } else if (word == "entry") {
      std::istringstream f(rest);
      std::string name, value, date;
      TuneEntry e;
      if (!(f >> name >> value >> date) || !parseValue(value, e.value) || !plausibleDate(date))
        return corrupt(lineNo, "bad entry '" + rest + "'");
      e.date = date;
      std::getline(f, e.detail);
      e.detail = trim(e.detail);
      entries[name] = std::move(e);
    } else {
      return corrupt(lineNo, "unknown item '" + word + "'");
    }
  }
  if (!magic) return corrupt(lineNo, "empty file");
  if (!cpu || !isa || !cpus) return corrupt(lineNo, "no cpu, isa or cpus line");
  if (!(c.key == key)) {
    c.state = TuneCache::State::OtherMachine;
    c.problem = "measured on " + keyText(c.key) + ", this machine is " + keyText(key);
    return c;
  }
  c.state = TuneCache::State::Loaded;
  c.entries = std::move(entries);
  return c;
}

std::string writeTuneCache(const std::string& path, const TuneKey& key,
                           const std::map<std::string, TuneEntry>& entries) {
  if (path.empty()) return "no file";
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path p(path);
  if (p.has_parent_path()) fs::create_directories(p.parent_path(), ec);
  TuneCache old = readTuneCache(path, key);
  std::map<std::string, TuneEntry> all;
  if (old.state == TuneCache::State::Loaded) all = std::move(old.entries);
  for (const auto& [name, e] : entries) all[name] = e;
  std::string text =
      "# braid machine profile (docs/env.md, BRAID_TUNE_CACHE): measured once per machine,\n"
      "# measured again when the CPU differs; delete the file to measure again.\n";
  text += std::string(kMagic) + "\n";
  text += "cpu " + oneLine(key.cpuModel) + "\n";
  if (!key.cpuId.empty()) text += "cpuid " + oneLine(key.cpuId) + "\n";
  text += "isa " + oneLine(key.isa) + "\n";
  text += "cpus " + std::to_string(key.cpus) + "\n";
  for (const auto& [name, e] : all)
    text += "entry " + name + " " + (e.value == kTuneNever ? "never" : std::to_string(e.value)) +
            " " + e.date + " " + oneLine(e.detail) + "\n";
  static std::atomic<unsigned> written{0};  // threads of one process write files of their own
  const std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." +
                          std::to_string(written.fetch_add(1, std::memory_order_relaxed));
  Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!fd) return "cannot create " + tmp + ": " + std::strerror(errno);
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t w = ::write(fd.get(), text.data() + done, text.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      const std::string why = std::strerror(errno);
      fd.reset();
      ::unlink(tmp.c_str());
      return "cannot write " + tmp + ": " + why;
    }
    done += static_cast<std::size_t>(w);
  }
  if (const int err = fd.close(); err != 0) {
    ::unlink(tmp.c_str());
    return "cannot write " + tmp + ": " + errnoText(err);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    ::unlink(tmp.c_str());
    return "cannot rename " + tmp + " to " + path + ": " + why;
  }
  return "";
}

std::string tuneDateNow() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

TuneCacheLock::TuneCacheLock(const std::string& path, int timeoutMs) {
  if (path.empty()) return;
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path p(path);
  if (p.has_parent_path()) fs::create_directories(p.parent_path(), ec);
  fd_.reset(::open((path + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  if (!fd_) return;
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeoutMs);
  for (;;) {
    if (::flock(fd_.get(), LOCK_EX | LOCK_NB) == 0) return;
    if ((errno != EWOULDBLOCK && errno != EINTR) || std::chrono::steady_clock::now() >= until)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  fd_.reset();
}

TuneCacheLock::~TuneCacheLock() {
  if (fd_) ::flock(fd_.get(), LOCK_UN);
}

}  // namespace braid::machine
