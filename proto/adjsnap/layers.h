// The names of a run's layer sets (adjsnap.v1.Layers), as DevitoPRO spells them, and which
// tiers each one uses. Shared by the daemon, libadjsnap and adjsnap.
#pragma once

#include <string>

#include "adjsnap/v1/control.pb.h"

namespace adjsnap {

struct LayersEntry {
  v1::Layers layers;
  const char* name;
  bool device, host, disk;
};

inline constexpr LayersEntry kLayersTable[] = {
    {v1::LAYERS_DISK_HOST_DEVICE, "DiskHostDevice", true, true, true},
    {v1::LAYERS_HOST_DEVICE, "HostDevice", true, true, false},
    {v1::LAYERS_DISK_HOST, "DiskHost", false, true, true},
    {v1::LAYERS_HOST, "Host", false, true, false},
    {v1::LAYERS_DEVICE, "Device", true, false, false},
    {v1::LAYERS_DISK, "Disk", false, false, true},
    {v1::LAYERS_NO_LAYERS, "NoLayers", false, false, false},
};

// Null for LAYERS_DEFAULT and unknown values.
inline const LayersEntry* FindLayers(v1::Layers layers) {
  for (const auto& e : kLayersTable) {
    if (e.layers == layers) return &e;
  }
  return nullptr;
}

inline const char* LayersName(v1::Layers layers) {
  const LayersEntry* e = FindLayers(layers);
  return e ? e->name : "default";
}

// "" parses as LAYERS_DEFAULT; false for an unknown name.
inline bool ParseLayers(const std::string& name, v1::Layers* layers) {
  if (name.empty()) {
    *layers = v1::LAYERS_DEFAULT;
    return true;
  }
  for (const auto& e : kLayersTable) {
    if (name == e.name) {
      *layers = e.layers;
      return true;
    }
  }
  return false;
}

// RunSpec.overwrite with a Device layer: the client's GPU pool keeps each step once. The
// refusal, said alike by libadjsnap (before it sets up a GPU) and by the daemon.
inline std::string OverwriteWithDeviceLayers(const std::string& run, v1::Layers layers) {
  const LayersEntry* e = FindLayers(layers);
  if (!run.empty() && e && e->device) {
    return "run '" + run + "': overwrite with layers " + e->name +
           ": the client's GPU pool keeps each step once; use layers without Device";
  }
  return "";
}

}  // namespace adjsnap
