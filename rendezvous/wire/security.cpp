#include "rendezvous/wire/security.h"

#include <sys/random.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <grpcpp/grpcpp.h>
#include <grpcpp/security/server_credentials.h>
#include <sstream>

#include "rendezvous/store/hex.h"

namespace ddprun {

void check_token_form(std::string_view token) {
  if (token.empty()) throw AuthConfigError("the token is empty");
  if (token.size() > 4096) {
    throw AuthConfigError("the token has " + std::to_string(token.size()) +
                          " characters; at most 4096");
  }
  for (unsigned char c : token) {
    if (c < 0x21 || c > 0x7e) {
      throw AuthConfigError("the token may hold printable ASCII characters only, without spaces");
    }
  }
}

std::string random_token() {
  unsigned char bytes[32];
  size_t got = 0;
  while (got < sizeof bytes) {
    ssize_t n = getrandom(bytes + got, sizeof bytes - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error(std::string("getrandom: ") + std::strerror(errno));
    }
    got += static_cast<size_t>(n);
  }
  return to_hex(std::string(reinterpret_cast<const char*>(bytes), sizeof bytes));
}

std::string read_pem_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw AuthConfigError("cannot read " + path + ": " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  std::string pem = text.str();
  if (pem.find("-----BEGIN ") == std::string::npos) {
    throw AuthConfigError(path + " is not a PEM file (no -----BEGIN line)");
  }
  return pem;
}

std::shared_ptr<grpc::ServerCredentials> server_credentials(const TlsFiles& tls) {
  if (!tls.enabled()) return grpc::InsecureServerCredentials();
  if (tls.cert.empty() || tls.key.empty()) {
    throw AuthConfigError("hosting a rendezvous with TLS needs both a certificate and its key");
  }
  grpc::SslServerCredentialsOptions options(
      tls.ca.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                     : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  options.pem_key_cert_pairs.push_back({read_pem_file(tls.key), read_pem_file(tls.cert)});
  if (!tls.ca.empty()) options.pem_root_certs = read_pem_file(tls.ca);
  return grpc::SslServerCredentials(options);
}

std::shared_ptr<grpc::ChannelCredentials> channel_credentials(const TlsFiles& tls) {
  if (!tls.enabled()) return grpc::InsecureChannelCredentials();
  if (tls.cert.empty() != tls.key.empty()) {
    throw AuthConfigError("a TLS client certificate needs its key, and a key its certificate");
  }
  grpc::SslCredentialsOptions options;
  // The service's certificate is checked against the CA; without one, the
  // certificate this node holds is trusted (one self-signed certificate
  // shared by the nodes), and without either, the system's roots.
  if (!tls.ca.empty()) {
    options.pem_root_certs = read_pem_file(tls.ca);
  } else if (!tls.cert.empty()) {
    options.pem_root_certs = read_pem_file(tls.cert);
  }
  if (!tls.cert.empty()) {
    options.pem_cert_chain = read_pem_file(tls.cert);
    options.pem_private_key = read_pem_file(tls.key);
  }
  return grpc::SslCredentials(options);
}

void attach_token(grpc::ClientContext& ctx, const std::string& token) {
  if (!token.empty()) ctx.AddMetadata(kTokenMetadataKey, token);
}

bool tokens_equal(std::string_view expected, std::string_view given) {
  // Every byte of the expected token is looked at whatever the given one
  // holds, so the time taken says nothing about how much of it matched.
  unsigned char diff = expected.size() == given.size() ? 0 : 1;
  for (size_t i = 0; i < expected.size(); ++i) {
    const unsigned char g = i < given.size() ? static_cast<unsigned char>(given[i]) : 0;
    diff |= static_cast<unsigned char>(expected[i]) ^ g;
  }
  return diff == 0;
}

}  // namespace ddprun
