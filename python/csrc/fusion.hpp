// braid_torch._C.FusionBuffer (fusion.cpp).
#pragma once

#include <pybind11/pybind11.h>

namespace braid_torch {

/// Adds FusionBuffer to the extension module.
void bindFusion(pybind11::module_& m);

}  // namespace braid_torch
