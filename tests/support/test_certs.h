// Certificates for TLS tests, made by openssl in a temp folder: a CA, a
// certificate for the service (127.0.0.1 and localhost), one for a client,
// and a second CA with a "stranger" certificate it signed.
#pragma once

#include <filesystem>
#include <string>

namespace ddptest {

class TestCerts {
 public:
  // Throws std::runtime_error (naming the folder with openssl's log) on failure.
  TestCerts();
  ~TestCerts();
  TestCerts(const TestCerts&) = delete;
  TestCerts& operator=(const TestCerts&) = delete;

  // "ca.pem", "server.pem", "server.key", "client.pem", "client.key",
  // "other.pem", "stranger.pem", "stranger.key".
  std::string file(const std::string& name) const { return (dir_ / name).string(); }

 private:
  std::filesystem::path dir_;
};

}  // namespace ddptest
