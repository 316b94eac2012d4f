// libraft's messages to and from our protobuf (ddprun/v1/raft.proto):
// what one Raft peer sends another over the gRPC service (raft_peer.h),
// and the configurations snapshots carry. No I/O, no state.
#pragma once

extern "C" {  // libraft's header declares C functions without saying so
#include <raft.h>
}

#include <cstdint>
#include <string>

#include "ddprun/v1/raft.pb.h"

namespace ddprun::raft_messages {

// The servers of a configuration into `out`.
void copy_conf_out(const struct raft_configuration& c, google::protobuf::RepeatedPtrField<ddprun::v1::RaftServer>* out);
// A configuration from the wire into `c` (raft_configuration_init'ed by
// the caller); libraft's error code, 0 when it took every server.
int conf_in(const google::protobuf::RepeatedPtrField<ddprun::v1::RaftServer>& in, struct raft_configuration* c);
// A message for the wire, naming its job and its sender.
std::string encode(const struct raft_message& m, const std::string& job_id, uint64_t from_id,
                   const std::string& from_address);
// Fills `m` from `pb`; the buffers libraft takes over (an AppendEntries'
// entries and their one batch, an InstallSnapshot's data and configuration)
// come from raft_malloc. False for a message libraft would not understand.
bool decode(const ddprun::v1::RaftMessage& pb, struct raft_message* m);

}  // namespace ddprun::raft_messages
