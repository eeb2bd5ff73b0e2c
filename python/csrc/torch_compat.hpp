// The torch headers the backend builds on, in one place. torch 2.x only: a third-party backend
// is a c10d::Backend subclass, which the Python ProcessGroup wraps per device (here: "cpu").
// Built and tested against the torch pinned in python/requirements.txt (docs/pytorch.md).
#pragma once

#include <torch/version.h>

#if TORCH_VERSION_MAJOR < 2
#error "braid_torch needs torch 2.x (scripts/install_venv.sh installs the pinned one into .venv)"
#endif

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#define BRAID_TORCH_HAS_BACKEND_CLASS 1

// c10d::Backend::supportsShrinking/shrink (torch.distributed.shrink_group): overridden for the
// pinned torch and later (an older 2.x has no shrink_group; braid_torch.shrink says so).
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 15)
#define BRAID_TORCH_HAS_SHRINK 1
#else
#define BRAID_TORCH_HAS_SHRINK 0
#endif

// c10d::Backend's abort hooks (supportsAbortHooks, registerAbortHook): torch 2.15 on.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 15)
#define BRAID_TORCH_HAS_ABORT_HOOKS 1
#else
#define BRAID_TORCH_HAS_ABORT_HOOKS 0
#endif

// c10d::Backend's completion hooks by key (supportsCompletionHooks, registerCompletionHook,
// c10d::CompletionHook): torch 2.15 on.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 15)
#define BRAID_TORCH_HAS_COMPLETION_HOOKS 1
#else
#define BRAID_TORCH_HAS_COMPLETION_HOOKS 0
#endif

// c10d::Backend's reconfigure API (supportsReconfigure, get_reconfigure_handle, reconfigure;
// torch.distributed._reconfigure) and merge (ProcessGroup.merge_remote_group): torch 2.15 on.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 15)
#define BRAID_TORCH_HAS_RECONFIGURE 1
#else
#define BRAID_TORCH_HAS_RECONFIGURE 0
#endif

namespace braid_torch {

using BackendBase = c10d::Backend;

}  // namespace braid_torch
