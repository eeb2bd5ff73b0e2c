// Which ranks share a host, in the sense that matters to transports: ranks with equal identity
// can map the same memory, see each other's processes (pids, /proc, process_vm_readv) and sleep
// on the same futexes.
#pragma once

#include <string>

namespace braid::transport {

/// hostname, kernel boot id (/proc/sys/kernel/random/boot_id), and the inodes of this process's
/// network and pid namespaces, e.g. "vm/61cc2315-...-f83e3c9f83e3/net:4026531833/pid:4026531836".
/// Processes in different network namespaces count as different hosts: that is how multi-host
/// tests emulate hosts on one machine. The pid namespace is part of it as well, because the
/// shared-memory transport names peers by pid (liveness, /proc/<pid>/fd, single-copy reads),
/// which only works inside one pid namespace. A part that cannot be read is left empty, so the
/// identity is still stable for this process.
std::string hostIdentity();

}  // namespace braid::transport
