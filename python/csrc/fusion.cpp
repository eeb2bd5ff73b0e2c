// braid_torch._C.FusionBuffer: braid::train::FusionBuffer (include/braid/fusion.hpp) over the
// collectives communicator of a braid process group. braid_torch.FusionBuffer (Python) wraps it;
// braid_torch.training.fusion_hook uses it for DDP. docs/training.md.
//
// add() queues an in-place allreduce of a CPU tensor and returns a torch Future that completes
// (on the buffer's thread) with the tensor once its result is in place, or with the error.
// Non-contiguous tensors go through a contiguous copy that is copied back before completion.
// The GIL is never held while waiting on the buffer: the buffer's thread completes futures,
// and a Python callback chained with then() takes the GIL there.
#include "fusion.hpp"

#include <Python.h>
#include <c10/util/Exception.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/csrc/utils/pybind.h>

#include <braid/fusion.hpp>
#include <braid/types.hpp>
#include <cmath>
#include <memory>
#include <mutex>
#include <optional>

#include "gil.hpp"
#include "process_group.hpp"
#include "tensor_util.hpp"

namespace py = pybind11;

namespace braid_torch {
namespace {

class TorchFusionBuffer {
 public:
  TorchFusionBuffer(c10::intrusive_ptr<ProcessGroupBraid> pg,
                    std::optional<std::int64_t> thresholdBytes, std::optional<double> cycleTimeMs)
      : pg_(std::move(pg)) {
    TORCH_CHECK(pg_, "braid: FusionBuffer: process_group is None");
    // Defaults: the group's options, i.e. BRAID_FUSION_THRESHOLD / BRAID_CYCLE_TIME as read
    // when the process group was created (src/core/env.cpp).
    braid::train::FusionOptions o = braid::train::FusionOptions::from(pg_->comm().options());
    if (thresholdBytes) {
      TORCH_CHECK(*thresholdBytes > 0, "braid: FusionBuffer on rank ", pg_->getRank(),
                  ": threshold_bytes must be positive, got ", *thresholdBytes);
      o.thresholdBytes = static_cast<std::size_t>(*thresholdBytes);
    }
    if (cycleTimeMs) {
      TORCH_CHECK(std::isfinite(*cycleTimeMs) && *cycleTimeMs >= 0, "braid: FusionBuffer on rank ",
                  pg_->getRank(), ": cycle_time_ms must be a finite number >= 0, got ",
                  *cycleTimeMs);
      o.cycleTime = std::chrono::microseconds(std::llround(*cycleTimeMs * 1000.0));
    }
    // Collective over the group (the buffer splits off its own communicator): run it in the
    // group's issue order, behind collectives still queued on it.
    pg_->runInOrder("braid:fusion_buffer", [this, o](braid::Comm& c) {
      fb_ = std::make_shared<braid::train::FusionBuffer>(c, o);
    });
  }

  ~TorchFusionBuffer() { close(); }

  /// Sends what is queued, waits for it, stops the buffer's thread. Idempotent.
  void close() {
    std::shared_ptr<braid::train::FusionBuffer> fb;
    {
      std::lock_guard<std::mutex> lk(mu_);
      fb.swap(fb_);
    }
    if (!fb) return;
    // The buffer's thread may need the GIL (a then() callback, a tensor's Python object).
    NoGil nogil;
    fb.reset();
  }

  c10::intrusive_ptr<c10::ivalue::Future> add(const at::Tensor& t, const std::string& opName) {
    auto fb = buffer("add");
    checkTensor(t, "FusionBuffer.add", "tensor");
    const braid::DataType dtype = requireReducible(t, "FusionBuffer.add");
    const auto op = braid::parseReduceOp(opName);
    TORCH_CHECK(op, "braid: FusionBuffer.add on rank ", pg_->getRank(), ": unknown op '", opName,
                "' (sum, prod, min, max, avg)");
    const at::Tensor work = t.is_contiguous() ? t : t.contiguous();
    auto fut = c10::make_intrusive<c10::ivalue::Future>(c10::TensorType::get());
    fb->allreduceNotify(byteSize(work) ? work.data_ptr() : nullptr,
                        static_cast<std::size_t>(work.numel()), dtype, *op,
                        [t, work, fut](std::exception_ptr e) {
                          if (e) {
                            fut->setError(e);
                            return;
                          }
                          try {
                            if (!work.is_same(t)) t.copy_(work);
                          } catch (...) {
                            fut->setError(std::current_exception());
                            throw;
                          }
                          fut->markCompleted(c10::IValue(t));
                        });
    return fut;
  }

  void flush() { buffer("flush")->flush(); }
  void synchronize() { buffer("synchronize")->synchronize(); }

  py::dict stats() {
    const auto s = buffer("stats")->stats();
    py::dict d;
    d["tensors"] = s.tensors;
    d["allreduces"] = s.allreduces;
    d["rounds"] = s.rounds;
    d["bytes"] = s.bytes;
    return d;
  }

  std::size_t thresholdBytes() { return buffer("threshold_bytes")->options().thresholdBytes; }
  double cycleTimeMs() {
    return static_cast<double>(buffer("cycle_time_ms")->options().cycleTime.count()) / 1000.0;
  }

 private:
  std::shared_ptr<braid::train::FusionBuffer> buffer(const char* what) {
    std::lock_guard<std::mutex> lk(mu_);
    TORCH_CHECK(fb_, "braid: FusionBuffer.", what, " on rank ", pg_->getRank(),
                ": the buffer is closed");
    return fb_;
  }

  c10::intrusive_ptr<ProcessGroupBraid> pg_;
  std::mutex mu_;
  std::shared_ptr<braid::train::FusionBuffer> fb_;
};

}  // namespace

void bindFusion(py::module_& m) {
  using Wrapper = torch::jit::PythonFutureWrapper;
  py::class_<TorchFusionBuffer>(m, "FusionBuffer",
                                "braid::train::FusionBuffer over a braid process group")
      .def(py::init<c10::intrusive_ptr<ProcessGroupBraid>, std::optional<std::int64_t>,
                    std::optional<double>>(),
           py::arg("backend"), py::arg("threshold_bytes") = py::none(),
           py::arg("cycle_time_ms") = py::none(), py::call_guard<py::gil_scoped_release>())
      .def(
          "add",
          [](TorchFusionBuffer& b, const at::Tensor& t, const std::string& op) {
            return std::make_shared<Wrapper>(b.add(t, op));
          },
          py::arg("tensor"), py::arg("op") = std::string("sum"))
      .def("flush", &TorchFusionBuffer::flush, py::call_guard<py::gil_scoped_release>())
      .def("synchronize", &TorchFusionBuffer::synchronize, py::call_guard<py::gil_scoped_release>())
      .def("close", &TorchFusionBuffer::close)
      .def("stats", &TorchFusionBuffer::stats)
      .def_property_readonly("threshold_bytes", &TorchFusionBuffer::thresholdBytes)
      .def_property_readonly("cycle_time_ms", &TorchFusionBuffer::cycleTimeMs);
}

}  // namespace braid_torch
