#include "ddp/error_file.h"

#include <cxxabi.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <mutex>
#include "channel/error_file.h"
#include <typeinfo>

namespace ddp {
namespace {

std::string demangle(const char* name) {
  int status = 0;
  char* d = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  std::string out = (status == 0 && d) ? d : name;
  std::free(d);
  return out;
}

std::string error_file_path() {
  const char* path = std::getenv("TORCHELASTIC_ERROR_FILE");
  return path ? path : "";
}

[[noreturn]] void on_terminate() {
  std::string message = "terminate called without an active exception";
  if (auto eptr = std::current_exception()) {
    const std::type_info* type = abi::__cxa_current_exception_type();
    const std::string type_name = type ? demangle(type->name()) : "unknown exception";
    try {
      std::rethrow_exception(eptr);
    } catch (const std::exception& e) {
      message = type_name + ": " + e.what();
    } catch (...) {
      message = type_name;
    }
  }
  write_error_file(error_file_path(), message);
  std::fflush(stdout);  // what the program printed before it died
  std::fprintf(stderr, "terminate called after an uncaught exception: %s\n", message.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace

bool write_error_file(const std::string& path, const std::string& message) {
  if (path.empty()) return false;
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  std::ofstream out(path, std::ios::trunc);
  if (!out) return false;
  out << ddprun::channel::error_file_json(
             message, std::chrono::duration_cast<std::chrono::seconds>(now).count())
      << "\n";
  return static_cast<bool>(out);
}

std::string record_error(const std::exception& e) {
  const std::string message = demangle(typeid(e).name()) + ": " + e.what();
  write_error_file(error_file_path(), message);
  std::fflush(stdout);
  std::fprintf(stderr, "error: %s\n", message.c_str());
  std::fflush(stderr);
  return message;
}

void install_error_file_handler() {
  static std::once_flag once;
  std::call_once(once, [] { std::set_terminate(on_terminate); });
}

}  // namespace ddp
