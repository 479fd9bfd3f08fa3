// snapbench --device (device.cc; built with CUDA only).
#pragma once

#include <cstdint>

#include "snapd/client.h"

int DeviceBench(snapd::Client& c, uint64_t steps, uint64_t bytes, double compute_ms, bool json);
