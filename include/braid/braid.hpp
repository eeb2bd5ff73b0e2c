// braid: collective communication for CPU clusters. Include this one header.
#pragma once

#include <braid/comm.hpp>
#include <braid/error.hpp>
#include <braid/options.hpp>
#include <braid/store.hpp>
#include <braid/types.hpp>
