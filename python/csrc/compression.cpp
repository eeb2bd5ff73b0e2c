// braid_torch._C.Compression: braid's C++ compressors (braid::train::Compressor,
// include/braid/compress.hpp) over the collectives communicator of a braid process group, for
// DDP comm hooks (braid_torch.training.BraidCompressionState, docs/training.md).
//
// allreduce(tensor, key, op) queues the compressed allreduce on the group's worker, in issue
// order with the group's other collectives, and returns at once with a torch Future that the
// worker completes when the result is in the tensor (or sets to the error). So under DDP the
// compression and its collectives of one bucket run on braid's worker while autograd goes on
// computing the gradients of the next buckets.
//
// Error feedback: one braid::train::ErrorFeedback per key (DDP's bucket index), used only on
// the worker thread, as is the Compressor (one thread at a time, every rank in the same order:
// the issue order is the same on every rank). A key whose element count changes (DDP rebuilds
// its buckets after the first step) starts a new residual.
#include "compression.hpp"

#include <c10/util/Exception.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/csrc/utils/pybind.h>

#include <braid/compress.hpp>
#include <braid/types.hpp>
#include <map>
#include <memory>
#include <mutex>

#include "process_group.hpp"

namespace py = pybind11;

namespace braid_torch {
namespace {

class TorchCompression {
 public:
  TorchCompression(c10::intrusive_ptr<ProcessGroupBraid> pg, const std::string& method,
                   bool errorFeedback, std::size_t blockElements, std::uint64_t seed)
      : pg_(std::move(pg)), errorFeedback_(errorFeedback) {
    TORCH_CHECK(pg_, "braid: Compression: process_group is None");
    auto spec = braid::train::CompressionSpec::parse(method);
    TORCH_CHECK(spec, "braid: Compression on rank ", pg_->getRank(), ": unknown method '", method,
                "' (none, int8, topk:RATIO, randk:RATIO, sign; RATIO in (0, 1])");
    TORCH_CHECK(blockElements > 0, "braid: Compression on rank ", pg_->getRank(),
                ": block must be positive");
    spec->blockElements = blockElements;
    spec->seed = seed;
    state_ = std::make_shared<State>();
    state_->compressor = braid::train::Compressor::create(*spec);
  }

  /// Queues the compressed allreduce of `t` (a CPU fp32 contiguous tensor, in place) with the
  /// residual of `key`; the future completes with [t].
  c10::intrusive_ptr<c10::ivalue::Future> allreduce(const at::Tensor& t, std::int64_t key,
                                                    const std::string& opName) {
    const int rank = pg_->getRank();
    TORCH_CHECK(t.defined() && t.device().is_cpu() && t.layout() == c10::kStrided,
                "braid: Compression.allreduce on rank ", rank,
                ": tensor must be a dense CPU tensor");
    TORCH_CHECK(t.scalar_type() == at::kFloat, "braid: Compression.allreduce on rank ", rank,
                ": the compressors take float32 tensors, got ", t.scalar_type());
    TORCH_CHECK(t.is_contiguous(), "braid: Compression.allreduce on rank ", rank,
                ": tensor must be contiguous (a DDP bucket's buffer is)");
    braid::ReduceOp op;
    if (opName == "avg")
      op = braid::ReduceOp::Avg;
    else if (opName == "sum")
      op = braid::ReduceOp::Sum;
    else
      TORCH_CHECK(false, "braid: Compression.allreduce on rank ", rank, ": op must be 'avg' or ",
                  "'sum', got '", opName, "'");
    auto state = state_;
    const bool ef = errorFeedback_;
    return pg_->runAsync("braid:compressed_all_reduce", {t},
                         [state, t, key, op, ef](braid::Comm& c) {
                           const auto count = static_cast<std::size_t>(t.numel());
                           auto* data = count ? t.data_ptr<float>() : nullptr;
                           braid::train::CompressStats s;
                           if (ef) {
                             auto& slot = state->feedback[key];
                             if (!slot || slot->count != count) {
                               slot = std::make_unique<Feedback>(*state->compressor, count);
                             }
                             s = slot->ef.allreduce(c, data, count, op);
                           } else {
                             s = state->compressor->allreduce(c, data, count, op);
                           }
                           std::lock_guard<std::mutex> lk(state->mu);
                           state->wireBytes += s.wireBytes;
                           state->denseWireBytes += s.denseWireBytes;
                           ++state->calls;
                         });
  }

  py::dict stats() const {
    std::lock_guard<std::mutex> lk(state_->mu);
    py::dict d;
    d["wire_bytes"] = state_->wireBytes;
    d["dense_wire_bytes"] = state_->denseWireBytes;
    d["allreduces"] = state_->calls;
    return d;
  }

  std::string method() const { return state_->compressor->spec().toString(); }

 private:
  struct Feedback {
    Feedback(braid::train::Compressor& c, std::size_t n) : ef(c), count(n) {}
    braid::train::ErrorFeedback ef;
    std::size_t count;
  };
  // Shared with the queued operations, which may outlive this object (DDP drops its hook state
  // while a bucket's future is still pending only on error paths).
  struct State {
    std::unique_ptr<braid::train::Compressor> compressor;
    std::map<std::int64_t, std::unique_ptr<Feedback>> feedback;  // worker thread only
    mutable std::mutex mu;                                       // guards the counters
    double wireBytes = 0;
    double denseWireBytes = 0;
    std::int64_t calls = 0;
  };

  c10::intrusive_ptr<ProcessGroupBraid> pg_;
  bool errorFeedback_;
  std::shared_ptr<State> state_;
};

}  // namespace

void bindCompression(py::module_& m) {
  using Wrapper = torch::jit::PythonFutureWrapper;
  py::class_<TorchCompression>(m, "Compression",
                               "braid::train::Compressor over a braid process group")
      .def(py::init<c10::intrusive_ptr<ProcessGroupBraid>, const std::string&, bool, std::size_t,
                    std::uint64_t>(),
           py::arg("backend"), py::arg("method"), py::arg("error_feedback") = true,
           py::arg("block") = 256, py::arg("seed") = 0x5eed)
      .def(
          "allreduce",
          [](TorchCompression& c, const at::Tensor& t, std::int64_t key, const std::string& op) {
            return std::make_shared<Wrapper>(c.allreduce(t, key, op));
          },
          py::arg("tensor"), py::arg("key") = 0, py::arg("op") = std::string("avg"))
      .def("stats", &TorchCompression::stats)
      .def_property_readonly("method", &TorchCompression::method);
}

}  // namespace braid_torch
