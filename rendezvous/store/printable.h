// Text from elsewhere (what a worker wrote, what another node told the
// rendezvous), made safe to print on a terminal or in a log line: escape
// sequences (ESC [ ... m colours, ESC ] ... BEL titles) and other control
// characters could repaint or retitle the user's terminal, hide the
// summary, or (a newline) forge a log line of ddprun's own.
#pragma once

#include <string>
#include <string_view>

namespace ddprun {

// text without control characters and escape sequences (C0, DEL, and the
// C1 range as UTF-8); newlines are kept when keep_newlines, tabs always.
std::string printable(std::string_view text, bool keep_newlines = true);

}  // namespace ddprun
