// The GIL around blocking calls of the backend: a thread that waits for other ranks, for the
// queue's worker or for the hook thread must not hold it, since those may need it (a future's
// Python callback, a Python hook, a tensor's Python object).
#pragma once

#include <Python.h>

namespace braid_torch {

/// Releases the GIL for the scope when this thread holds it (and does nothing otherwise: a
/// thread of braid's, or a binding that released it already).
class NoGil {
 public:
  NoGil() : saved_(Py_IsInitialized() && PyGILState_Check() ? PyEval_SaveThread() : nullptr) {}
  ~NoGil() {
    if (saved_) PyEval_RestoreThread(saved_);
  }
  NoGil(const NoGil&) = delete;
  NoGil& operator=(const NoGil&) = delete;

 private:
  PyThreadState* saved_;
};

}  // namespace braid_torch
