// Tensors to braid buffers: dtype and reduce-op mapping, argument checks, and staging of
// non-contiguous tensors (braid reads and writes flat memory).
#pragma once

#include <ATen/ATen.h>

#include <braid/types.hpp>
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "torch_compat.hpp"

namespace braid_torch {

inline std::size_t byteSize(const at::Tensor& t) {
  return static_cast<std::size_t>(t.numel()) * t.element_size();
}

/// braid's element type for a torch dtype, if braid can reduce it.
std::optional<braid::DataType> reducibleType(at::ScalarType t);

/// The braid type a reduction over `t` runs in; throws naming the operation and the dtype.
braid::DataType requireReducible(const at::Tensor& t, const char* op);

/// braid's element type and reduction for a reduction of `t` with torch's `op` (PREMUL_SUM
/// carries its factor). Throws, naming the operation (`what`), the ReduceOp and the dtype, for a
/// dtype braid does not reduce and for a combination braid::isSupported rejects (BAND on float,
/// MIN on complex, AVG on bool).
struct Reduction {
  braid::DataType dtype;
  braid::Reduction op;
};
Reduction toReduction(const c10d::ReduceOp& op, const at::Tensor& t, const char* what);

/// CPU, strided (dense) tensor; throws naming the operation and argument.
void checkTensor(const at::Tensor& t, const char* op, const char* what);
/// Exactly one tensor, checked.
const at::Tensor& checkSingle(const std::vector<at::Tensor>& ts, const char* op, const char* what);
void checkRoot(std::int64_t root, int size, const char* op);
void checkSameType(const at::Tensor& a, const at::Tensor& b, const char* op, const char* what);

/// Contiguous tensors laid out back to back in memory (e.g. the chunks of one flat tensor):
/// a collective can then use them as one buffer, without a copy. Returns the first's address.
void* packedBase(const std::vector<at::Tensor>& ts);

/// An output written through a contiguous stand-in, copied back by commit() when the user's
/// tensor is not contiguous. Copyable (shares the tensors).
class OutStage {
 public:
  OutStage() = default;
  explicit OutStage(const at::Tensor& user)
      : user_(user), work_(user.is_contiguous() ? user : at::empty(user.sizes(), user.options())) {}
  void* ptr() const { return byteSize(work_) ? work_.data_ptr() : nullptr; }
  const at::Tensor& work() const { return work_; }
  void commit() const {
    if (!work_.is_same(user_)) user_.copy_(work_);
  }

 private:
  at::Tensor user_, work_;
};

/// In-place operand: like OutStage, but the stand-in starts with the user's data.
/// `user` must outlive the stage (the operation's captured tensor does); a contiguous one is
/// borrowed, not copied (no reference counting on the per-call path).
class InOutStage {
 public:
  explicit InOutStage(const at::Tensor& user) : user_(user), work_(user.expect_contiguous()) {}
  void* ptr() const { return byteSize(*work_) ? work_->data_ptr() : nullptr; }
  void commit() const {
    if (!work_->is_same(user_)) user_.copy_(*work_);
  }

 private:
  const at::Tensor& user_;
  c10::MaybeOwned<at::Tensor> work_;
};

/// Copies tensors into one byte buffer, back to back (returns the buffer, or the tensors' own
/// memory when they are already packed: see packedBase).
struct Packed {
  at::Tensor storage;  // undefined when the tensors' own memory is used
  void* base = nullptr;
};
Packed pack(const std::vector<at::Tensor>& ts);
/// Allocates (or reuses, when packed) the receive side for `ts`; unpack() copies into them.
Packed receiveArea(const std::vector<at::Tensor>& ts);
void unpack(const Packed& p, const std::vector<at::Tensor>& ts);

std::size_t totalBytes(const std::vector<at::Tensor>& ts);

}  // namespace braid_torch
