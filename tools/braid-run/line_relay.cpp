#include "line_relay.hpp"

#include <unistd.h>

#include <cerrno>

namespace braid::run {

bool writeAll(int fd, std::string_view text) {
  while (!text.empty()) {
    const ssize_t n = ::write(fd, text.data(), text.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    text.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

void LineRelay::emit(std::string_view text) {
  if (broken_ || text.empty()) return;
  if (!writeAll(outFd_, text)) broken_ = true;
}

void LineRelay::feed(std::string_view bytes) {
  out_.clear();
  while (!bytes.empty()) {
    const std::size_t nl = bytes.find('\n');
    if (nl == std::string_view::npos) {
      partial_.append(bytes);
      break;
    }
    out_ += prefix_;
    out_ += partial_;
    out_.append(bytes.substr(0, nl + 1));
    partial_.clear();
    bytes.remove_prefix(nl + 1);
  }
  while (partial_.size() >= kMaxLineBytes) {
    out_ += prefix_;
    out_.append(partial_, 0, kMaxLineBytes);
    out_ += '\n';
    partial_.erase(0, kMaxLineBytes);
  }
  emit(out_);
}

void LineRelay::finish() {
  if (partial_.empty()) return;
  out_.clear();
  out_ += prefix_;
  out_ += partial_;
  out_ += '\n';
  partial_.clear();
  emit(out_);
}

}  // namespace braid::run
