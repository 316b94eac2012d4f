#include "launch/env_store.h"

#include "channel/env_names.h"
#include "tcpstore/client.h"
#include "tcpstore/server.h"

namespace ddp {
namespace {

// Owns the server (on rank 0 when no launcher hosts one) and the client,
// and shows the client's keys under this attempt's prefix.
class EnvStore final : public ddprun::Store {
 public:
  EnvStore(std::unique_ptr<ddprun::tcpstore::Server> server,
           std::unique_ptr<ddprun::tcpstore::Client> client, const std::string& prefix)
      : server_(std::move(server)), client_(std::move(client)), view_(prefix, *client_) {}

  void set(const std::string& key, std::string_view value) override { view_.set(key, value); }
  std::string get(const std::string& key, std::chrono::milliseconds timeout) override {
    return view_.get(key, timeout);
  }
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    view_.wait(keys, timeout);
  }
  int64_t add(const std::string& key, int64_t delta) override { return view_.add(key, delta); }

 private:
  std::unique_ptr<ddprun::tcpstore::Server> server_;
  std::unique_ptr<ddprun::tcpstore::Client> client_;
  ddprun::PrefixStore view_;
};

bool is_loopback(const std::string& addr) {
  return addr == "localhost" || addr.rfind("127.", 0) == 0 || addr == "::1";
}

}  // namespace

std::shared_ptr<ddprun::Store> connect_env_store(LaunchInfo& info, std::chrono::milliseconds timeout,
                                                 const EnvLookup& env) {
  if (info.master_addr.empty() || info.master_port == 0) {
    throw ConfigError("ddp: WORLD_SIZE=" + std::to_string(info.world_size) +
                      " but neither DDPRUN_RDZV_ADDR nor MASTER_ADDR and MASTER_PORT are set: start "
                      "the workers with ddprun or torchrun, or set MASTER_ADDR/MASTER_PORT");
  }
  std::unique_ptr<ddprun::tcpstore::Server> server;
  if (!info.agent_store && info.rank == 0) {
    ddprun::tcpstore::ServerOptions o;
    o.host = is_loopback(info.master_addr) ? "127.0.0.1" : "0.0.0.0";
    o.port = info.master_port;
    try {
      server = std::make_unique<ddprun::tcpstore::Server>(o);
    } catch (const ddprun::tcpstore::ListenError& e) {
      throw ConfigError("ddp: rank 0 cannot host the store on MASTER_PORT=" +
                        std::to_string(info.master_port) + ": " + e.what());
    }
  }
  ddprun::tcpstore::ClientOptions o;
  o.host = info.master_addr;
  o.port = info.master_port;
  o.connect_timeout = timeout;
  if (auto v = env(ddprun::channel::kTcpStoreProtocol); v && !v->empty()) {
    if (*v == "1") {
      o.version = ddprun::tcpstore::Version::kV1;
    } else if (*v == "2") {
      o.version = ddprun::tcpstore::Version::kV2;
    } else {
      throw ConfigError("ddp: DDPRUN_TCPSTORE_PROTOCOL='" + *v + "' is not 1 or 2");
    }
  }
  std::unique_ptr<ddprun::tcpstore::Client> client;
  try {
    client = std::make_unique<ddprun::tcpstore::Client>(o);
  } catch (const ddprun::StoreError& e) {
    throw ConfigError(std::string("ddp: rank ") + std::to_string(info.rank) + ": " + e.what() +
                      " (MASTER_ADDR=" + info.master_addr +
                      ", MASTER_PORT=" + std::to_string(info.master_port) + ")");
  }
  if (!info.local_addr_given && !client->local_address().empty() && !is_loopback(info.master_addr)) {
    info.local_addr = client->local_address();
  }
  const std::string prefix = "/worker/attempt_" + std::to_string(info.restart_count);
  return std::make_shared<EnvStore>(std::move(server), std::move(client), prefix);
}

}  // namespace ddp
