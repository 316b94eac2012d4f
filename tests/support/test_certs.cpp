#include "support/test_certs.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <stdexcept>

namespace ddptest {

TestCerts::TestCerts()
    : dir_(std::filesystem::temp_directory_path() / ("ddprun-certs-" + std::to_string(getpid()))) {
  std::filesystem::remove_all(dir_);
  std::filesystem::create_directories(dir_);
  const std::string script = (dir_ / "make.sh").string();
  std::ofstream(script) << R"sh(set -e
cd "$(dirname "$0")"
exec >log 2>&1
for ca in ca other; do
  openssl req -x509 -newkey rsa:2048 -nodes -keyout $ca.key -out $ca.pem -days 2 -subj /CN=$ca
done
make_cert() {
  openssl req -newkey rsa:2048 -nodes -keyout $1.key -out $1.csr -subj /CN=$1
  printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' > $1.ext
  openssl x509 -req -in $1.csr -CA $2.pem -CAkey $2.key -CAcreateserial -out $1.pem -days 2 \
    -extfile $1.ext
}
make_cert server ca
make_cert client ca
make_cert stranger other
)sh";
  if (std::system(("bash " + script).c_str()) != 0) {
    throw std::runtime_error("openssl could not make test certificates; see " +
                             (dir_ / "log").string());
  }
}

TestCerts::~TestCerts() { std::filesystem::remove_all(dir_); }

}  // namespace ddptest
