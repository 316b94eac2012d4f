// The address Gloo's transport binds to, checked before Gloo sees it: Gloo
// does not survive a name that does not resolve (it crashes inside the
// device), so a bad --local-addr must become an error that names it.
// No LibTorch here.
#pragma once

#include <string>

namespace ddp {

// Throws ConfigError ("ddp: <setting>='<addr>' ...") when addr does not
// resolve or is not an address of this machine (nothing can bind to it).
// `setting` names where the value came from, for the message.
void check_local_addr(const std::string& addr, const std::string& setting);

}  // namespace ddp
