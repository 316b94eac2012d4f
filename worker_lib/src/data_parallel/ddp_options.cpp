#include "ddp/ddp_options.h"

#include <stdexcept>

namespace ddp {

std::string to_string(SyncStrategy s) {
  switch (s) {
    case SyncStrategy::kNaive: return "naive";
    case SyncStrategy::kFlat: return "flat";
    case SyncStrategy::kOverlap: return "overlap";
    case SyncStrategy::kBucketed: return "bucketed";
  }
  return "?";
}

SyncStrategy parse_sync_strategy(const std::string& name) {
  for (auto s : {SyncStrategy::kNaive, SyncStrategy::kFlat, SyncStrategy::kOverlap,
                 SyncStrategy::kBucketed}) {
    if (to_string(s) == name) return s;
  }
  throw std::invalid_argument("unknown sync strategy '" + name +
                              "' (expected naive, flat, overlap or bucketed)");
}

std::string to_string(CommDtype d) {
  switch (d) {
    case CommDtype::kParam: return "param";
    case CommDtype::kBFloat16: return "bf16";
  }
  return "?";
}

CommDtype parse_comm_dtype(const std::string& name) {
  if (name == "param" || name == "fp32") return CommDtype::kParam;
  if (name == "bf16") return CommDtype::kBFloat16;
  throw std::invalid_argument("unknown gradient communication dtype '" + name +
                              "' (expected param, fp32 or bf16)");
}

std::string to_string(Overlap o) {
  switch (o) {
    case Overlap::kAuto: return "auto";
    case Overlap::kOn: return "on";
    case Overlap::kOff: return "off";
  }
  return "?";
}

Overlap parse_overlap(const std::string& name) {
  for (auto o : {Overlap::kAuto, Overlap::kOn, Overlap::kOff}) {
    if (to_string(o) == name) return o;
  }
  throw std::invalid_argument("unknown overlap '" + name + "' (expected auto, on or off)");
}

}  // namespace ddp
