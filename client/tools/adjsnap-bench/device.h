// adjsnap-bench --device (device.cc; built with CUDA only).
#pragma once

#include <cstdint>

#include "adjsnap/client.h"

int DeviceBench(adjsnap::Client& c, uint64_t steps, uint64_t bytes, double compute_ms, bool json);
