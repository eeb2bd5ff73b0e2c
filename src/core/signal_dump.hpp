// SIGUSR1 -> every live communicator of the process dumps its flight recorder.
//
// Signal dispositions are process-wide, so this is the one place braid keeps process-wide state:
// a registry of the live communicators that asked for signal dumps, the handler, a pipe and a
// dump thread (docs/architecture.md says why). The handler only write()s one byte to the pipe
// (async-signal-safe); the dump thread reads it and asks each registered communicator to dump,
// under the registry's lock, so a communicator being destroyed waits for its dump to finish.
//
// The handler is installed with the first registration, and only if SIGUSR1 has its default
// disposition: an application that set its own handler (or SIG_IGN) keeps it, and braid logs
// that signal dumps are off. It is restored to the default when the last communicator goes, if
// it is still braid's. The dump thread runs while at least one communicator is registered.
#pragma once

namespace braid::core {

using DumpFn = void (*)(void* self);

/// Registers `self` for dumps on SIGUSR1. Returns true when braid's handler is installed
/// (now or by an earlier registration), false when the signal belongs to the application.
bool registerSignalDump(void* self, DumpFn dump);
/// Removes `self`; returns once no dump of it is running.
void unregisterSignalDump(void* self);

}  // namespace braid::core
