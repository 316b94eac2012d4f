// The checks and conversions of ddprun's flag values, each throwing
// UsageError with one line that names the flag (launcher/cli.cpp calls them
// once CLI11 has split the command line).
#pragma once

#include <string>
#include <vector>

#include "launcher/cli.h"

namespace ddprun {

std::string quote(const std::string& s);
// "a,b,,c" -> {"a", "b", "", "c"}; "" -> {""}: every piece, empty ones too.
std::vector<std::string> split_list(const std::string& value);
int parse_int(const std::string& flag, const std::string& value, int min, int max);
double parse_seconds(const std::string& flag, const std::string& value, bool allow_zero,
                     double min = 0.001, double max = 30 * 86400.0);
void check_nproc(const std::string& value);                          // --nproc-per-node
void parse_hang_timeout(const std::string& value, CliOptions& o);   // auto, auto:SECONDS, SECONDS
void parse_nnodes(const std::string& value, CliOptions& o);          // N or MIN:MAX
void parse_endpoint(const std::string& value, CliOptions& o);        // --rdzv-endpoint HOST[:PORT]
std::string parse_host_mode(const std::string& flag, const std::string& value);  // auto, on, off
void parse_rdzv_conf(const std::string& value, CliOptions& o);       // --rdzv-conf K=V,...
std::vector<int> parse_local_ranks(const std::string& value);        // --local-ranks-filter
std::vector<std::string> parse_filters(const std::string& value);    // --duplicate-*-filters
std::vector<std::string> parse_signals(const std::string& value);    // --signals-to-handle

}  // namespace ddprun
