// Who may talk to a rendezvous: a shared token every call carries, and
// optional TLS. One definition for the service, the agents and the workers.
//
// The token travels as call metadata (kTokenMetadataKey) and the service
// checks it in each handler before touching anything: gRPC's
// AuthMetadataProcessor would do it for us, but only on TLS channels (with
// insecure ones it aborts the process), and the token must work without TLS.
#pragma once

#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>

namespace grpc {
class ChannelCredentials;
class ServerCredentials;
class ClientContext;
}  // namespace grpc

namespace ddprun {

inline constexpr const char* kTokenMetadataKey = "x-ddprun-token";

// PEM files. On the service: its certificate and key; with a CA, clients
// must present a certificate signed by it (mutual TLS). On a client: the CA
// that signed the service's certificate (verified), and with cert and key,
// the client's own certificate.
struct TlsFiles {
  std::string cert;
  std::string key;
  std::string ca;
  bool enabled() const { return !cert.empty() || !key.empty() || !ca.empty(); }
};

struct RendezvousAuth {
  std::string token;  // empty: none required (service) / none sent (client)
  TlsFiles tls;
};

// A setting that cannot be used (unreadable file, malformed token). The
// message names the file or the value.
class AuthConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Checks a token's form: 1 to 4096 printable ASCII characters (it travels
// as a gRPC metadata value). Throws AuthConfigError saying what is wrong.
void check_token_form(std::string_view token);

// A fresh random token (32 bytes from the kernel, as hex).
std::string random_token();

// Reads a whole PEM file; throws AuthConfigError naming it.
std::string read_pem_file(const std::string& path);

// Credentials for the service / for clients; throw AuthConfigError.
std::shared_ptr<grpc::ServerCredentials> server_credentials(const TlsFiles& tls);
std::shared_ptr<grpc::ChannelCredentials> channel_credentials(const TlsFiles& tls);

// Adds the token (if any) to a call.
void attach_token(grpc::ClientContext& ctx, const std::string& token);

// Compares in time independent of where the strings differ.
bool tokens_equal(std::string_view expected, std::string_view given);

}  // namespace ddprun
