#include "transport/tcp/socket.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <braid/error.hpp>
#include <cerrno>
#include <cstring>
#include <memory>

namespace braid::transport::tcp {

int millisecondsUntil(Deadline deadline, int capMs) {
  const auto left = deadline - Clock::now();
  if (left <= Clock::duration::zero()) return 0;
  // Round up so a sleep never ends just before the deadline and spins on a 0 ms timeout.
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
  return ms > capMs ? capMs : static_cast<int>(ms);
}

namespace {

struct AddrInfoDeleter {
  void operator()(addrinfo* ai) const { ::freeaddrinfo(ai); }
};
using AddrInfoPtr = std::unique_ptr<addrinfo, AddrInfoDeleter>;

AddrInfoPtr resolve(const std::string& host, std::uint16_t port, std::string& error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* result = nullptr;
  const std::string service = std::to_string(port);
  const int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &result);
  if (rc != 0) {
    error = "cannot resolve '" + host + "': " + ::gai_strerror(rc);
    return nullptr;
  }
  return AddrInfoPtr(result);
}

void setBuffers(int fd, std::size_t bytes) {
  if (bytes == 0) return;
  // The kernel clamps to net.core.{w,r}mem_max and doubles the value for bookkeeping.
  const int value = bytes > static_cast<std::size_t>(1 << 30) ? 1 << 30 : static_cast<int>(bytes);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &value, sizeof value);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &value, sizeof value);
}

[[noreturn]] void throwSystem(const std::string& what, int err) {
  throw Error(ErrorCode::Internal, what + ": " + errnoText(err));
}

}  // namespace

Fd listenOn(const std::string& host, std::size_t bufferBytes, std::uint16_t& port,
            std::uint16_t portLow, std::uint16_t portHigh) {
  std::string error;
  AddrInfoPtr ai = resolve(host, 0, error);
  if (!ai) throw Error(ErrorCode::InvalidArgument, "tcp listen address: " + error);
  const bool ranged = portLow != 0;
  const unsigned first = ranged ? portLow : 0;
  const unsigned last = ranged ? portHigh : 0;
  int lastBindError = 0;
  for (unsigned candidate = first; candidate <= last; ++candidate) {
    Fd fd(::socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!fd) throwSystem("tcp listen on " + host + ": socket", errno);
    setBuffers(fd.get(), bufferBytes);
    sockaddr_storage want{};
    std::memcpy(&want, ai->ai_addr, ai->ai_addrlen);
    if (ranged) {
      // A fixed port may still have connections of an earlier job in TIME_WAIT.
      const int one = 1;
      ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      if (want.ss_family == AF_INET6)
        reinterpret_cast<sockaddr_in6*>(&want)->sin6_port =
            htons(static_cast<std::uint16_t>(candidate));
      else
        reinterpret_cast<sockaddr_in*>(&want)->sin_port =
            htons(static_cast<std::uint16_t>(candidate));
    }
    if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&want), ai->ai_addrlen) != 0) {
      const int err = errno;
      if (ranged && (err == EADDRINUSE || err == EACCES)) {
        lastBindError = err;
        continue;
      }
      throwSystem("tcp listen on " + host + ": bind", err);
    }
    if (::listen(fd.get(), SOMAXCONN) != 0) {
      const int err = errno;
      if (ranged && err == EADDRINUSE) {  // lost a race for the port after bind
        lastBindError = err;
        continue;
      }
      throwSystem("tcp listen on " + host + ": listen", err);
    }
    sockaddr_storage local{};
    socklen_t len = sizeof local;
    if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&local), &len) != 0)
      throwSystem("tcp listen on " + host + ": getsockname", errno);
    port = local.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&local)->sin6_port)
                                       : ntohs(reinterpret_cast<sockaddr_in*>(&local)->sin_port);
    return fd;
  }
  throw Error(ErrorCode::InvalidArgument,
              "BRAID_PORT_RANGE=" + std::to_string(portLow) + "-" + std::to_string(portHigh) +
                  ": no free port for the tcp data listener on " + host + " (tried " +
                  std::to_string(last - first + 1) + " port" + (last > first ? "s" : "") +
                  ", last error: " + errnoText(lastBindError) + ")");
}

Fd connectTo(const HostPort& address, std::size_t bufferBytes, Deadline deadline,
             std::string& error) {
  AddrInfoPtr ai = resolve(address.host, address.port, error);
  if (!ai) return Fd();
  for (addrinfo* a = ai.get(); a != nullptr; a = a->ai_next) {
    Fd fd(::socket(a->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!fd) {
      error = "socket: " + errnoText(errno);
      continue;
    }
    setBuffers(fd.get(), bufferBytes);
    if (::connect(fd.get(), a->ai_addr, a->ai_addrlen) == 0) return fd;
    if (errno != EINPROGRESS) {
      error = errnoText(errno);
      continue;
    }
    pollfd pfd{fd.get(), POLLOUT, 0};
    int rc;
    do {
      rc = ::poll(&pfd, 1, millisecondsUntil(deadline, 1000));
    } while ((rc == 0 && Clock::now() < deadline) || (rc < 0 && errno == EINTR));
    if (rc == 0) {
      error = "connect timed out";
      continue;
    }
    int soError = 0;
    socklen_t len = sizeof soError;
    ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &soError, &len);
    if (rc < 0 || soError != 0) {
      error = errnoText(rc < 0 ? errno : soError);
      continue;
    }
    return fd;
  }
  return Fd();
}

Fd acceptFrom(int listenFd, Deadline deadline) {
  for (;;) {
    const int fd = ::accept4(listenFd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) return Fd(fd);
    if (errno == EINTR || errno == ECONNABORTED) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) throwSystem("tcp accept", errno);
    if (Clock::now() >= deadline) return Fd();
    pollfd pfd{listenFd, POLLIN, 0};
    if (::poll(&pfd, 1, millisecondsUntil(deadline, 1000)) < 0 && errno != EINTR)
      throwSystem("tcp accept: poll", errno);
  }
}

Accepted acceptPending(int listenFd) {
  Accepted a;
  for (;;) {
    a.length = sizeof a.address;
    const int fd = ::accept4(listenFd, reinterpret_cast<sockaddr*>(&a.address), &a.length,
                             SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      a.fd.reset(fd);
      return a;
    }
    if (errno == EINTR || errno == ECONNABORTED) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EMFILE || errno == ENFILE ||
        errno == ENOBUFS || errno == ENOMEM)
      return Accepted{};
    throwSystem("tcp accept", errno);
  }
}

namespace {

// Moves bytes with `io` (one send or recv call) until done, polling for `events` in between.
template <typename Io>
bool transferExactly(int fd, std::size_t bytes, short events, Deadline deadline, std::string& error,
                     Io io) {
  std::size_t done = 0;
  while (done < bytes) {
    const ssize_t n = io(done);
    if (n > 0) {
      done += static_cast<std::size_t>(n);
      continue;
    }
    if (n == 0) {
      error = "connection closed by peer";
      return false;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      error = errnoText(errno);
      return false;
    }
    if (Clock::now() >= deadline) {
      error = "no handshake reply";
      return false;
    }
    pollfd pfd{fd, events, 0};
    ::poll(&pfd, 1, millisecondsUntil(deadline, 1000));
  }
  return true;
}

}  // namespace

bool sendExactly(int fd, const void* data, std::size_t bytes, Deadline deadline,
                 std::string& error) {
  const auto* p = static_cast<const std::uint8_t*>(data);
  return transferExactly(fd, bytes, POLLOUT, deadline, error, [&](std::size_t done) {
    return ::send(fd, p + done, bytes - done, MSG_NOSIGNAL | MSG_DONTWAIT);
  });
}

bool recvExactly(int fd, void* data, std::size_t bytes, Deadline deadline, std::string& error) {
  auto* p = static_cast<std::uint8_t*>(data);
  return transferExactly(fd, bytes, POLLIN, deadline, error, [&](std::size_t done) {
    return ::recv(fd, p + done, bytes - done, MSG_DONTWAIT);
  });
}

}  // namespace braid::transport::tcp
