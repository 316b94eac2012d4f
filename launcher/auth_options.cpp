#include "launcher/auth_options.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "launcher/cli.h"

namespace ddprun {
namespace {

// The file's status, once it is known to be a readable regular file.
struct stat check_readable(const char* flag, const std::string& path) {
  struct stat st {};
  if (path.empty()) return st;
  if (stat(path.c_str(), &st) != 0 || access(path.c_str(), R_OK) != 0) {
    throw UsageError(std::string(flag) + ": cannot read '" + path + "': " + std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) {
    throw UsageError(std::string(flag) + ": '" + path + "' is not a regular file");
  }
  return st;
}

std::string read_token_file(const std::string& path, std::vector<std::string>& warnings) {
  const struct stat st = check_readable("--rdzv-token-file", path);
  if (st.st_size > 64 * 1024) {
    throw UsageError("--rdzv-token-file: '" + path + "' holds " + std::to_string(st.st_size) +
                     " bytes; a token is one line");
  }
  if (st.st_mode & (S_IRGRP | S_IROTH)) {
    warnings.push_back("--rdzv-token-file: '" + path +
                       "' is readable by other users; chmod 600 it");
  }
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  std::string token = text.str();
  // One line; the newline an editor or `echo` leaves is not part of it.
  while (!token.empty() && (token.back() == '\n' || token.back() == '\r')) token.pop_back();
  return token;
}

}  // namespace

RendezvousAuth resolve_auth(const AuthFlags& flags, const std::string& env_token,
                            std::vector<std::string>& warnings) {
  if (!flags.token.empty() && !flags.token_file.empty()) {
    throw UsageError("--rdzv-token and --rdzv-token-file cannot be used together");
  }
  RendezvousAuth auth;
  const char* source = "DDPRUN_RDZV_TOKEN";
  if (!flags.token.empty()) {
    auth.token = flags.token;
    source = "--rdzv-token";
    warnings.push_back(
        "--rdzv-token: a token on the command line is visible to every user of this machine "
        "(ps); prefer DDPRUN_RDZV_TOKEN or --rdzv-token-file");
  } else if (!flags.token_file.empty()) {
    auth.token = read_token_file(flags.token_file, warnings);
    source = "--rdzv-token-file";
  } else {
    auth.token = env_token;
  }
  if (!auth.token.empty() || !flags.token_file.empty()) {
    try {
      check_token_form(auth.token);
    } catch (const AuthConfigError& e) {
      throw UsageError(std::string(source) + ": " + e.what());
    }
  }
  check_readable("--rdzv-tls-cert", flags.tls.cert);
  check_readable("--rdzv-tls-key", flags.tls.key);
  check_readable("--rdzv-tls-ca", flags.tls.ca);
  if (flags.tls.cert.empty() != flags.tls.key.empty()) {
    throw UsageError(flags.tls.cert.empty() ? "--rdzv-tls-key: needs --rdzv-tls-cert, its certificate"
                                            : "--rdzv-tls-cert: needs --rdzv-tls-key, its private key");
  }
  auth.tls = flags.tls;
  return auth;
}

}  // namespace ddprun
