// Node specs, progress reports and job status between their plain types (types.h) and
// the wire (ddprun.v1.Progress, StatusResponse), for the service and its
// clients alike.
#pragma once

#include <string>

#include "ddprun/v1/rendezvous.pb.h"
#include "rendezvous/store/types.h"

namespace ddprun {

NodeSpec from_proto(const v1::NodeInfo& n);
void to_proto(const NodeSpec& s, v1::NodeInfo* n);

ProgressInfo from_proto(const v1::Progress& p);
void to_proto(const ProgressInfo& i, v1::Progress* p);

NodeCollectives from_proto(const v1::NodeCollectives& c);
void to_proto(const NodeCollectives& c, v1::NodeCollectives* out);

JobStatus from_proto(const v1::StatusResponse& r);
void to_proto(const std::string& job_id, const JobStatus& s, v1::StatusResponse* r);

}  // namespace ddprun
