// The UCX entry points of a build without UCX (ucx_transport.hpp): the transport itself lives
// in src/transport/ucx/, compiled only when pkg-config found UCX (CMakeLists.txt).
#ifndef BRAID_HAVE_UCX

#include <braid/error.hpp>

#include "transport/ucx/ucx_transport.hpp"

namespace braid::transport {

bool ucxAvailable() noexcept {
  return false;
}

std::string ucxUnavailableReason() {
  return "this build of braid has no UCX transport (configured without UCX: install libucx-dev "
         "and reconfigure, and do not pass -DBRAID_WITH_UCX=OFF)";
}

std::string ucxVersion() {
  return "";
}

std::size_t ucxEndpointsMade() noexcept {
  return 0;
}

namespace {

[[noreturn]] void absent(int rank, int size) {
  throw Error(ErrorCode::InvalidArgument, "createUcxTransport: rank " + std::to_string(rank) +
                                              " of " + std::to_string(size) + ": " +
                                              ucxUnavailableReason());
}

}  // namespace

std::unique_ptr<Transport> createUcxTransport(Store&, int rank, int size, const UcxOptions&) {
  absent(rank, size);
}

std::unique_ptr<UcxListening> openUcx(int rank, int size, const UcxOptions&) {
  absent(rank, size);
}

std::unique_ptr<Transport> createUcxTransport(std::unique_ptr<UcxListening>,
                                              std::vector<std::string>, int rank, int size,
                                              const UcxOptions&) {
  absent(rank, size);
}

}  // namespace braid::transport

#endif  // BRAID_HAVE_UCX
