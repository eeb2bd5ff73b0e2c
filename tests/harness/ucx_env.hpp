// UCX_TLS for the UCX transports this process creates next (UCX reads it in ucp_config_read);
// UCX's shared-memory transports detect a dead peer only with their error handling on
// (docs/ucx.md).
#pragma once

#include <cstdlib>
#include <string>

namespace braid::test {

inline void useUcxTls(const char* tls) {
  ::setenv("UCX_TLS", tls, 1);
  for (const char* name : {"UCX_POSIX_ERROR_HANDLING", "UCX_SYSV_ERROR_HANDLING"}) {
    if (std::string(tls).find("sm") != std::string::npos)
      ::setenv(name, "y", 1);
    else
      ::unsetenv(name);  // UCX warns about variables of transports it does not use
  }
}

}  // namespace braid::test
