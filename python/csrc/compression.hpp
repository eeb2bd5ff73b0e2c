// braid_torch._C.Compression (compression.cpp).
#pragma once

#include <pybind11/pybind11.h>

namespace braid_torch {

/// Adds Compression to the extension module.
void bindCompression(pybind11::module_& m);

}  // namespace braid_torch
