// The one place that knows which torch it is built against.
//
// torch 1.x: a third-party backend is a c10d::ProcessGroup subclass (the creator registered with
// torch.distributed.Backend.register_backend returns it). torch 2.x: it is a c10d::Backend
// subclass, which the Python ProcessGroup wraps per device. The collective signatures we override
// are the same in both; Work (c10d::Work, Work.hpp), ReduceOp and the option structs too.
#pragma once

#include <torch/version.h>

#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#define BRAID_TORCH_HAS_BACKEND_CLASS 1
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#define BRAID_TORCH_HAS_BACKEND_CLASS 0
#endif

#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

namespace braid_torch {

#if BRAID_TORCH_HAS_BACKEND_CLASS
using BackendBase = c10d::Backend;
#else
using BackendBase = c10d::ProcessGroup;
#endif

}  // namespace braid_torch
