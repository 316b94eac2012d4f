#include "rendezvous/control_plane/raft/raft_node.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <random>
#include <stdexcept>

#include "ddprun/v1/raft.pb.h"
#include "rendezvous/control_plane/raft/raft_messages.h"
#include "rendezvous/control_plane/raft/raft_node_impl.h"

namespace ddprun {
namespace {

using Pb = ddprun::v1::RaftMessage;

}  // namespace

// libraft's raft_io and raft_fsm, and the callbacks of the requests made
// here, as static functions over RaftNode.
struct RaftNodeIo {
  static RaftNode::Impl& impl(struct raft_io* io) { return *static_cast<RaftNode::Impl*>(io->impl); }

  static int init(struct raft_io*, raft_id, const char*) { return 0; }

  // An I/O request done at once, its callback run later (libraft expects
  // it after the call that made the request returns).
  template <class Req, class Cb>
  static void later(RaftNode::Impl& s, Req* req, Cb cb) {
    s.completions.push_back([req, cb](int status) {
      if (cb) cb(req, status);
    });
  }

  static void close(struct raft_io* io, raft_io_close_cb cb) {
    auto& s = impl(io);
    s.complete(RAFT_CANCELED);  // what libraft still waits for ends before it frees itself
    s.closed = true;
    if (cb) cb(io);
  }

  static int load(struct raft_io* io, raft_term* term, raft_id* voted_for, struct raft_snapshot** snapshot,
                  raft_index* start_index, struct raft_entry** entries, size_t* n_entries) {
    auto& s = impl(io);
    *term = s.term;
    *voted_for = s.voted_for;
    *snapshot = nullptr;
    *start_index = 1;
    *entries = nullptr;
    *n_entries = 0;
    if (!s.bootstrapped) return 0;
    // The bootstrap configuration is entry 1, as every member's first.
    auto* e = static_cast<struct raft_entry*>(raft_calloc(1, sizeof(struct raft_entry)));
    void* batch = raft_malloc(s.bootstrap_conf.size());
    if (!e || !batch) {
      raft_free(e);
      raft_free(batch);
      return RAFT_NOMEM;
    }
    std::memcpy(batch, s.bootstrap_conf.data(), s.bootstrap_conf.size());
    e->term = 1;
    e->type = RAFT_CHANGE;
    e->buf.base = batch;
    e->buf.len = s.bootstrap_conf.size();
    e->batch = batch;
    *entries = e;
    *n_entries = 1;
    return 0;
  }

  static int start(struct raft_io* io, unsigned msecs, raft_io_tick_cb tick, raft_io_recv_cb recv) {
    auto& s = impl(io);
    s.tick = tick;
    s.recv = recv;
    s.tick_every = std::chrono::milliseconds(msecs);
    s.started = true;
    return 0;
  }

  static int bootstrap(struct raft_io* io, const struct raft_configuration* conf) {
    auto& s = impl(io);
    if (s.term != 0) return RAFT_CANTBOOTSTRAP;
    struct raft_buffer buf {};
    const int rv = raft_configuration_encode(conf, &buf);
    if (rv != 0) return rv;
    s.bootstrap_conf.assign(static_cast<const char*>(buf.base), buf.len);
    raft_free(buf.base);
    s.bootstrapped = true;
    s.term = 1;
    return 0;
  }

  static int recover(struct raft_io*, const struct raft_configuration*) { return RAFT_IOERR; }

  static int set_term(struct raft_io* io, raft_term term) {
    impl(io).term = term;
    impl(io).voted_for = 0;
    return 0;
  }

  static int set_vote(struct raft_io* io, raft_id id) {
    impl(io).voted_for = id;
    return 0;
  }

  static int send(struct raft_io* io, struct raft_io_send* req, const struct raft_message* m, raft_io_send_cb cb) {
    RaftNode& n = *impl(io).node;
    // Encoded now: libraft may release the entries once the callback ran.
    n.transport_.send(m->server_address, raft_messages::encode(*m, n.options_.job_id, n.options_.id, n.options_.address));
    later(impl(io), req, cb);
    return 0;
  }

  static int append(struct raft_io* io, struct raft_io_append* req, const struct raft_entry[], unsigned,
                    raft_io_append_cb cb) {
    // In memory: libraft's own log is the copy; nothing to write.
    later(impl(io), req, cb);
    return 0;
  }

  static int truncate(struct raft_io*, raft_index) { return 0; }

  static int snapshot_put(struct raft_io* io, unsigned, struct raft_io_snapshot_put* req,
                          const struct raft_snapshot* snap, raft_io_snapshot_put_cb cb) {
    auto& s = impl(io);
    RaftNode::Impl::Snapshot copy;
    copy.index = snap->index;
    copy.term = snap->term;
    copy.conf_index = snap->configuration_index;
    raft_messages::copy_conf_out(snap->configuration, &copy.conf);
    for (unsigned i = 0; i < snap->n_bufs; ++i) {
      copy.data.append(static_cast<const char*>(snap->bufs[i].base), snap->bufs[i].len);
    }
    s.snapshot = std::move(copy);
    later(s, req, cb);
    return 0;
  }

  static int snapshot_get(struct raft_io* io, struct raft_io_snapshot_get* req, raft_io_snapshot_get_cb cb) {
    auto& s = impl(io);
    s.completions.push_back([&s, req, cb](int status) {
      if (status != 0 || !s.snapshot) {
        cb(req, nullptr, status != 0 ? status : RAFT_NOTFOUND);
        return;
      }
      auto* out = static_cast<struct raft_snapshot*>(raft_calloc(1, sizeof(struct raft_snapshot)));
      auto* bufs = static_cast<struct raft_buffer*>(raft_calloc(1, sizeof(struct raft_buffer)));
      void* data = raft_malloc(s.snapshot->data.size() > 0 ? s.snapshot->data.size() : 1);
      if (!out || !bufs || !data || raft_messages::conf_in(s.snapshot->conf, &out->configuration) != 0) {
        raft_free(out);
        raft_free(bufs);
        raft_free(data);
        cb(req, nullptr, RAFT_NOMEM);
        return;
      }
      std::memcpy(data, s.snapshot->data.data(), s.snapshot->data.size());
      out->index = s.snapshot->index;
      out->term = s.snapshot->term;
      out->configuration_index = s.snapshot->conf_index;
      bufs[0].base = data;
      bufs[0].len = s.snapshot->data.size();
      out->bufs = bufs;
      out->n_bufs = 1;
      cb(req, out, 0);
    });
    return 0;
  }

  static raft_time time(struct raft_io* io) {
    return static_cast<raft_time>(
        std::chrono::duration_cast<std::chrono::milliseconds>(impl(io).lived_now().time_since_epoch()).count());
  }

  static int random(struct raft_io* io, int min, int max) {
    return std::uniform_int_distribution<int>(min, max)(impl(io).rng);
  }

  // A request's outcome reaches its waiter (which may have given up).
  static void finish(RaftNode* node, const std::shared_ptr<RaftNode::Outcome>& outcome, int status) {
    node->publish();  // what the request changed (an applied state) is seen by its waiter
    {
      std::lock_guard lock(node->mu_);
      outcome->done = true;
      outcome->status = status;
    }
    node->cv_.notify_all();
  }
  template <class Req>
  struct Pending {
    Req req{};
    std::shared_ptr<RaftNode::Outcome> outcome;
    RaftNode* node = nullptr;
  };
  // The callback of a request made with pending<Req>().
  template <class Req>
  static void done(Req* req, int status) {
    auto* p = static_cast<Pending<Req>*>(req->data);
    finish(p->node, p->outcome, status);
    delete p;
  }
  static void applied(struct raft_apply* req, int status, void*) { done(req, status); }

  // The FSM: the newest applied blob.
  static RaftNode::Impl& fsm_impl(struct raft_fsm* fsm) { return *static_cast<RaftNode::Impl*>(fsm->data); }

  static int fsm_apply(struct raft_fsm* fsm, const struct raft_buffer* buf, void** result) {
    auto& s = fsm_impl(fsm);
    s.state.assign(static_cast<const char*>(buf->base), buf->len);
    s.has_state = true;
    ++s.state_version;
    *result = nullptr;
    return 0;
  }

  static int fsm_snapshot(struct raft_fsm* fsm, struct raft_buffer* bufs[], unsigned* n) {
    auto& s = fsm_impl(fsm);
    *bufs = static_cast<struct raft_buffer*>(raft_calloc(1, sizeof(struct raft_buffer)));
    if (!*bufs) return RAFT_NOMEM;
    // A leading byte says whether there is a state (an empty one is a state).
    (*bufs)[0].len = s.state.size() + 1;
    (*bufs)[0].base = raft_malloc((*bufs)[0].len);
    if (!(*bufs)[0].base) {
      raft_free(*bufs);
      return RAFT_NOMEM;
    }
    static_cast<char*>((*bufs)[0].base)[0] = s.has_state ? 1 : 0;
    std::memcpy(static_cast<char*>((*bufs)[0].base) + 1, s.state.data(), s.state.size());
    *n = 1;
    return 0;
  }

  static int fsm_restore(struct raft_fsm* fsm, struct raft_buffer* buf) {
    auto& s = fsm_impl(fsm);
    const char* p = static_cast<const char*>(buf->base);
    s.has_state = buf->len > 0 && p[0] == 1;
    s.state.assign(buf->len > 1 ? p + 1 : p, buf->len > 1 ? buf->len - 1 : 0);
    ++s.state_version;
    raft_free(buf->base);  // ours now (libraft hands it over)
    return 0;
  }
};

RaftNode::RaftNode(RaftNodeOptions options, RaftTransport& transport)
    : impl_(std::make_unique<Impl>()), options_(std::move(options)), transport_(transport) {
  impl_->node = this;
  if (options_.id == 0) throw std::invalid_argument("raft: a member's id must be > 0");
  if (options_.heartbeat >= options_.election) {
    throw std::invalid_argument("raft: the heartbeat must be shorter than the election timeout");
  }
  struct raft_io& io = impl_->io;
  io.version = 1;
  io.impl = impl_.get();
  io.init = &RaftNodeIo::init;
  io.close = &RaftNodeIo::close;
  io.load = &RaftNodeIo::load;
  io.start = &RaftNodeIo::start;
  io.bootstrap = &RaftNodeIo::bootstrap;
  io.recover = &RaftNodeIo::recover;
  io.set_term = &RaftNodeIo::set_term;
  io.set_vote = &RaftNodeIo::set_vote;
  io.send = &RaftNodeIo::send;
  io.append = &RaftNodeIo::append;
  io.truncate = &RaftNodeIo::truncate;
  io.snapshot_put = &RaftNodeIo::snapshot_put;
  io.snapshot_get = &RaftNodeIo::snapshot_get;
  io.time = &RaftNodeIo::time;
  io.random = &RaftNodeIo::random;
  struct raft_fsm& fsm = impl_->fsm;
  fsm.version = 1;
  fsm.data = impl_.get();
  fsm.apply = &RaftNodeIo::fsm_apply;
  fsm.snapshot = &RaftNodeIo::fsm_snapshot;
  fsm.restore = &RaftNodeIo::fsm_restore;
  const int rv = raft_init(&impl_->raft, &io, &fsm, options_.id, options_.address.c_str());
  if (rv != 0) throw std::runtime_error(std::string("raft: init: ") + raft_strerror(rv));
  raft_set_heartbeat_timeout(&impl_->raft, static_cast<unsigned>(options_.heartbeat.count()));
  raft_set_election_timeout(&impl_->raft, static_cast<unsigned>(options_.election.count()));
  raft_set_snapshot_threshold(&impl_->raft, options_.snapshot_threshold);
  raft_set_snapshot_trailing(&impl_->raft, options_.snapshot_trailing);
  // A member cut off and back must not depose a leader the others follow.
  raft_set_pre_vote(&impl_->raft, true);
  thread_ = std::thread([this] { loop(); });
}

RaftNode::~RaftNode() {
  run([this] {
    if (impl_->closed) return;
    raft_close(&impl_->raft, nullptr);
  });
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void RaftNode::start(bool bootstrap) {
  std::string error;
  run([&] {
    int rv = 0;
    if (bootstrap) {
      struct raft_configuration conf;
      raft_configuration_init(&conf);
      rv = raft_configuration_add(&conf, options_.id, options_.address.c_str(), RAFT_VOTER);
      if (rv == 0) rv = raft_bootstrap(&impl_->raft, &conf);
      raft_configuration_close(&conf);
    }
    if (rv == 0) rv = raft_start(&impl_->raft);
    if (rv != 0) error = std::string(raft_strerror(rv)) + ": " + raft_errmsg(&impl_->raft);
  });
  if (!error.empty()) throw std::runtime_error("raft: cannot start member " + std::to_string(options_.id) + ": " + error);
}

void RaftNode::deliver(const std::string& bytes) {
  auto pb = std::make_shared<Pb>();
  if (!pb->ParseFromString(bytes) || pb->job_id() != options_.job_id || pb->to_id() != options_.id) return;
  post([this, pb] {
    if (!impl_->started || impl_->closed) return;
    // A member removed from the group (its node was lost, paused past the
    // election timeout, or stepped back) does not know it, and asks for
    // votes: granted by members it can still reach, it would win a term of
    // its own and depose the real leader. Votes are asked of a member only
    // by those in its configuration (a member not yet configured takes
    // anything: it is being added). A leader's entries come from anyone: a
    // member that lags may not know it yet.
    const struct raft_configuration& conf = impl_->raft.configuration;
    if ((pb->type() == RAFT_IO_REQUEST_VOTE || pb->type() == RAFT_IO_TIMEOUT_NOW) && conf.n > 0) {
      bool known = false;
      for (unsigned i = 0; i < conf.n && !known; ++i) known = conf.servers[i].id == pb->from_id();
      if (!known) return;
    }
    impl_->heard[pb->from_id()] = impl_->lived_now();
    struct raft_message m;
    if (!raft_messages::decode(*pb, &m)) return;
    impl_->recv(&impl_->io, &m);  // libraft owns m's buffers now
  });
}

RaftStatus RaftNode::status() const {
  std::lock_guard lock(mu_);
  return status_;
}

bool RaftNode::wait_for(const std::function<bool(const RaftStatus&)>& until, Clock::time_point deadline) const {
  // `until` runs without the lock, so it may call this node (state(), say).
  std::unique_lock lock(mu_);
  while (true) {
    const uint64_t seen = changes_;
    const RaftStatus s = status_;
    lock.unlock();
    if (until(s)) return true;
    lock.lock();
    if (!cv_.wait_until(lock, deadline, [&] { return stop_ || changes_ != seen; }) || stop_) return false;
  }
}

std::chrono::steady_clock::time_point RaftNode::majority_heard_at() const {
  std::lock_guard lock(mu_);
  return majority_heard_at_;
}

std::chrono::steady_clock::time_point RaftNode::majority_contact_at() const {
  std::lock_guard lock(mu_);
  return majority_contact_at_;
}

std::optional<std::string> RaftNode::state() const {
  std::lock_guard lock(mu_);
  return state_;
}

bool RaftNode::request(const std::function<bool(const std::shared_ptr<Outcome>&)>& begin,
                       Clock::time_point deadline) {
  auto outcome = std::make_shared<Outcome>();
  bool sent = false;
  run([&] { sent = begin(outcome); });
  if (!sent) return false;
  std::unique_lock lock(mu_);
  cv_.wait_until(lock, deadline, [&] { return outcome->done || stop_; });
  return outcome->done && outcome->status == 0;
}

namespace {

template <class Req>
RaftNodeIo::Pending<Req>* pending(RaftNode* node, const std::shared_ptr<RaftNode::Outcome>& outcome) {
  auto* p = new RaftNodeIo::Pending<Req>{};
  p->outcome = outcome;
  p->node = node;
  p->req.data = p;
  return p;
}

}  // namespace

bool RaftNode::apply(uint64_t term, const std::string& data, Clock::time_point deadline) {
  return request([&](const std::shared_ptr<Outcome>& outcome) {
    if (raft_state(&impl_->raft) != RAFT_LEADER || impl_->raft.current_term != term) return false;
    struct raft_buffer buf {};
    buf.len = data.size();
    buf.base = raft_malloc(buf.len > 0 ? buf.len : 1);
    if (!buf.base) return false;
    std::memcpy(buf.base, data.data(), data.size());
    auto* p = pending<struct raft_apply>(this, outcome);
    if (raft_apply(&impl_->raft, &p->req, &buf, 1, &RaftNodeIo::applied) != 0) {
      raft_free(buf.base);
      delete p;
      return false;
    }
    return true;
  }, deadline);
}

bool RaftNode::barrier(uint64_t term, Clock::time_point deadline) {
  return request([&](const std::shared_ptr<Outcome>& outcome) {
    if (raft_state(&impl_->raft) != RAFT_LEADER || impl_->raft.current_term != term) return false;
    auto* p = pending<struct raft_barrier>(this, outcome);
    if (raft_barrier(&impl_->raft, &p->req, &RaftNodeIo::done<struct raft_barrier>) != 0) {
      delete p;
      return false;
    }
    return true;
  }, deadline);
}

bool RaftNode::add_voter(uint64_t id, const std::string& address, Clock::time_point deadline) {
  return add_as(id, address, RAFT_VOTER, deadline);
}

bool RaftNode::add_standby(uint64_t id, const std::string& address, Clock::time_point deadline) {
  return add_as(id, address, RAFT_STANDBY, deadline);
}

bool RaftNode::add_as(uint64_t id, const std::string& address, int role, Clock::time_point deadline) {
  // Two changes: added as a spare, then given its role (libraft catches a
  // new voter up first); one added before (a change that failed) only
  // gets its role.
  const RaftStatus now = status();
  const bool added = std::find(now.members.begin(), now.members.end(), id) != now.members.end();
  for (const bool assign : {false, true}) {
    if (!assign && added) continue;
    const bool ok = request([&](const std::shared_ptr<Outcome>& outcome) {
      if (raft_state(&impl_->raft) != RAFT_LEADER) return false;
      auto* p = pending<struct raft_change>(this, outcome);
      const int rv = assign ? raft_assign(&impl_->raft, &p->req, id, role, &RaftNodeIo::done<struct raft_change>)
                            : raft_add(&impl_->raft, &p->req, id, address.c_str(), &RaftNodeIo::done<struct raft_change>);
      if (rv != 0) delete p;
      return rv == 0;
    }, deadline);
    if (!ok) return false;
  }
  return true;
}

bool RaftNode::remove(uint64_t id, Clock::time_point deadline) {
  return request([&](const std::shared_ptr<Outcome>& outcome) {
    if (raft_state(&impl_->raft) != RAFT_LEADER) return false;
    auto* p = pending<struct raft_change>(this, outcome);
    const int rv = raft_remove(&impl_->raft, &p->req, id, &RaftNodeIo::done<struct raft_change>);
    if (rv != 0) delete p;
    return rv == 0;
  }, deadline);
}

void RaftNode::transfer() {
  run([this] {
    if (raft_state(&impl_->raft) != RAFT_LEADER) return;
    using Transfer = struct raft_transfer;  // the struct, not the function of the same name
    auto* req = new Transfer{};
    if (::raft_transfer(&impl_->raft, req, 0, [](Transfer* r) { delete r; }) != 0) delete req;
  });
}

void RaftNode::post(std::function<void()> task) {
  {
    std::lock_guard lock(mu_);
    if (stop_) return;
    tasks_.push_back(std::move(task));
  }
  cv_.notify_all();
}

void RaftNode::run(const std::function<void()>& task) {
  if (std::this_thread::get_id() == thread_.get_id()) {
    task();
    publish();
    return;
  }
  auto done = std::make_shared<bool>(false);
  post([&task, done, this] {
    task();
    std::lock_guard lock(mu_);
    *done = true;
  });
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return *done || stop_; });
}

}  // namespace ddprun
