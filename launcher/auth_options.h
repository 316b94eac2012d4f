// How the launcher learns who may call the rendezvous: the job's token from
// --rdzv-token, --rdzv-token-file or DDPRUN_RDZV_TOKEN, and the TLS files
// of --rdzv-tls-cert/-key/-ca. Shared by `ddprun` and `ddprun rendezvous`.
#pragma once

#include <string>
#include <vector>

#include "rendezvous/wire/security.h"

namespace ddprun {

struct AuthFlags {
  std::string token;       // --rdzv-token
  std::string token_file;  // --rdzv-token-file
  TlsFiles tls;            // --rdzv-tls-cert, --rdzv-tls-key, --rdzv-tls-ca
};

// The token (flag, else file, else env_token) and TLS files, checked:
// files readable, the token well-formed. Throws UsageError naming the flag.
// Appends warnings for what works but exposes the token.
RendezvousAuth resolve_auth(const AuthFlags& flags, const std::string& env_token,
                            std::vector<std::string>& warnings);

}  // namespace ddprun
