#include "rendezvous/control_plane/raft/raft_messages.h"

#include <cstring>

namespace ddprun::raft_messages {

using Pb = ddprun::v1::RaftMessage;

void copy_conf_out(const struct raft_configuration& c, google::protobuf::RepeatedPtrField<ddprun::v1::RaftServer>* out) {
  for (unsigned i = 0; i < c.n; ++i) {
    auto* s = out->Add();
    s->set_id(c.servers[i].id);
    s->set_address(c.servers[i].address);
    s->set_role(c.servers[i].role);
  }
}

int conf_in(const google::protobuf::RepeatedPtrField<ddprun::v1::RaftServer>& in, struct raft_configuration* c) {
  raft_configuration_init(c);
  for (const auto& s : in) {
    const int rv = raft_configuration_add(c, s.id(), s.address().c_str(), s.role());
    if (rv != 0) {
      raft_configuration_close(c);
      return rv;
    }
  }
  return 0;
}

std::string encode(const struct raft_message& m, const std::string& job_id, uint64_t from_id,
                   const std::string& from_address) {
  Pb pb;
  pb.set_type(m.type);
  pb.set_from_id(from_id);
  pb.set_from_address(from_address);
  pb.set_to_id(m.server_id);
  pb.set_job_id(job_id);
  switch (m.type) {
    case RAFT_IO_REQUEST_VOTE: {
      const auto& a = m.request_vote;
      pb.set_term(a.term);
      pb.set_candidate_id(a.candidate_id);
      pb.set_last_log_index(a.last_log_index);
      pb.set_last_log_term(a.last_log_term);
      pb.set_disrupt_leader(a.disrupt_leader);
      pb.set_pre_vote(a.pre_vote);
      break;
    }
    case RAFT_IO_REQUEST_VOTE_RESULT: {
      const auto& a = m.request_vote_result;
      pb.set_term(a.term);
      pb.set_vote_granted(a.vote_granted);
      pb.set_pre_vote_result(a.pre_vote);
      break;
    }
    case RAFT_IO_APPEND_ENTRIES: {
      const auto& a = m.append_entries;
      pb.set_term(a.term);
      pb.set_prev_log_index(a.prev_log_index);
      pb.set_prev_log_term(a.prev_log_term);
      pb.set_leader_commit(a.leader_commit);
      for (unsigned i = 0; i < a.n_entries; ++i) {
        auto* e = pb.add_entries();
        e->set_term(a.entries[i].term);
        e->set_type(a.entries[i].type);
        e->set_data(static_cast<const char*>(a.entries[i].buf.base), a.entries[i].buf.len);
      }
      break;
    }
    case RAFT_IO_APPEND_ENTRIES_RESULT: {
      const auto& a = m.append_entries_result;
      pb.set_term(a.term);
      pb.set_rejected(a.rejected);
      pb.set_last_log_index(a.last_log_index);
      break;
    }
    case RAFT_IO_INSTALL_SNAPSHOT: {
      const auto& a = m.install_snapshot;
      pb.set_term(a.term);
      pb.set_last_log_index(a.last_index);
      pb.set_last_log_term(a.last_term);
      copy_conf_out(a.conf, pb.mutable_conf());
      pb.set_conf_index(a.conf_index);
      pb.set_snapshot(static_cast<const char*>(a.data.base), a.data.len);
      break;
    }
    case RAFT_IO_TIMEOUT_NOW: {
      const auto& a = m.timeout_now;
      pb.set_term(a.term);
      pb.set_last_log_index(a.last_log_index);
      pb.set_last_log_term(a.last_log_term);
      break;
    }
    default:
      break;
  }
  return pb.SerializeAsString();
}

// Fills `m` from `pb`; the buffers libraft takes over (an AppendEntries'
// entries and their one batch, an InstallSnapshot's data and configuration)
// come from raft_malloc. False for a message libraft would not understand.
bool decode(const Pb& pb, struct raft_message* m) {
  std::memset(m, 0, sizeof *m);
  m->type = static_cast<unsigned short>(pb.type());
  m->server_id = pb.from_id();
  m->server_address = pb.from_address().c_str();
  switch (pb.type()) {
    case RAFT_IO_REQUEST_VOTE:
      m->request_vote = {pb.term(), pb.candidate_id(), pb.last_log_index(), pb.last_log_term(), pb.disrupt_leader(),
                         pb.pre_vote()};
      return true;
    case RAFT_IO_REQUEST_VOTE_RESULT:
      m->request_vote_result.term = pb.term();
      m->request_vote_result.vote_granted = pb.vote_granted();
      m->request_vote_result.pre_vote = static_cast<raft_tribool>(pb.pre_vote_result());
      return true;
    case RAFT_IO_APPEND_ENTRIES: {
      auto& a = m->append_entries;
      a.term = pb.term();
      a.prev_log_index = pb.prev_log_index();
      a.prev_log_term = pb.prev_log_term();
      a.leader_commit = pb.leader_commit();
      a.n_entries = static_cast<unsigned>(pb.entries_size());
      if (a.n_entries == 0) return true;
      size_t total = 0;
      for (const auto& e : pb.entries()) total += e.data().size();
      a.entries = static_cast<struct raft_entry*>(raft_calloc(a.n_entries, sizeof(struct raft_entry)));
      void* batch = raft_malloc(total > 0 ? total : 1);
      if (!a.entries || !batch) {
        raft_free(a.entries);
        raft_free(batch);
        return false;
      }
      size_t at = 0;
      for (unsigned i = 0; i < a.n_entries; ++i) {
        const auto& e = pb.entries(static_cast<int>(i));
        std::memcpy(static_cast<char*>(batch) + at, e.data().data(), e.data().size());
        a.entries[i].term = e.term();
        a.entries[i].type = static_cast<unsigned short>(e.type());
        a.entries[i].buf.base = static_cast<char*>(batch) + at;
        a.entries[i].buf.len = e.data().size();
        a.entries[i].batch = batch;
        at += e.data().size();
      }
      return true;
    }
    case RAFT_IO_APPEND_ENTRIES_RESULT:
      m->append_entries_result.term = pb.term();
      m->append_entries_result.rejected = pb.rejected();
      m->append_entries_result.last_log_index = pb.last_log_index();
      return true;
    case RAFT_IO_INSTALL_SNAPSHOT: {
      auto& a = m->install_snapshot;
      a.term = pb.term();
      a.last_index = pb.last_log_index();
      a.last_term = pb.last_log_term();
      a.conf_index = pb.conf_index();
      if (conf_in(pb.conf(), &a.conf) != 0) return false;
      a.data.len = pb.snapshot().size();
      a.data.base = raft_malloc(a.data.len > 0 ? a.data.len : 1);
      if (!a.data.base) {
        raft_configuration_close(&a.conf);
        return false;
      }
      std::memcpy(a.data.base, pb.snapshot().data(), a.data.len);
      return true;
    }
    case RAFT_IO_TIMEOUT_NOW:
      m->timeout_now = {pb.term(), pb.last_log_index(), pb.last_log_term()};
      return true;
    default:
      return false;
  }
}

}  // namespace ddprun::raft_messages
