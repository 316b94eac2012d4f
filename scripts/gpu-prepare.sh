#!/usr/bin/env bash
# Run on a CPU machine with apt (Debian 12, like CI): downloads the Debian
# packages a GPU machine without registry access lacks to build ddprun and
# unpacks them into gpu-deps/ (git-ignored) to travel with the sources.
# CUDA, NCCL, CMake, a compiler and Python PyTorch 2.x (LibTorch with CUDA)
# come from the GPU machine itself. scripts/gpu-test.sh uses the folder.
#
#   scripts/gpu-prepare.sh [DEST]      # DEST defaults to <repo>/gpu-deps
#
# The folder must stay under 64 MiB (what the GPU machine receives besides
# the tracked files); the script prunes docs and unneeded static libraries,
# prints the size and fails when it is over.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
dest=${1:-$repo/gpu-deps}
limit_mib=${GPU_DEPS_LIMIT_MIB:-60}

# Dev packages for what CMakeLists.txt finds, plus the runtime libraries
# they link (ldd of libgrpc++, libgloo, protoc, grpc_cpp_plugin). libc,
# libstdc++, libssl3 and zlib's runtime are on every Debian/Ubuntu host.
pkgs=(
  # gRPC + protobuf (headers, CMake config, protoc, the gRPC plugin, libs)
  libgrpc-dev libgrpc++-dev libgrpc29 libgrpc++1.51
  libprotobuf-dev libprotobuf32 libprotobuf-lite32 libprotoc32
  protobuf-compiler protobuf-compiler-grpc
  libabsl-dev libabsl20220623 libc-ares-dev libc-ares2 libre2-dev libre2-9
  libssl-dev libssl3 zlib1g-dev zlib1g
  # logging, CLI, JSON, tests
  libspdlog-dev libspdlog1.10 libfmt-dev libfmt9 libcli11-dev nlohmann-json3-dev libgtest-dev
  # Gloo (the CPU communicator) and what libgloo links
  libgloo-dev libgloo0 libhiredis0.14 libibverbs1 libnl-3-200 libnl-route-3-200
  # libraft (the embedded control plane) and what it links
  libraft-dev libraft2 libuv1
  ninja-build
)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "gpu-prepare: downloading ${#pkgs[@]} packages"
(cd "$work" && apt-get download "${pkgs[@]}" >/dev/null)

rm -rf "$dest"
mkdir -p "$dest"
for deb in "$work"/*.deb; do
  dpkg-deb -x "$deb" "$dest"
done

# Prune what a build never reads: docs, man pages, and static libraries
# other than GoogleTest's (the only ones the build links statically).
rm -rf "$dest"/usr/share/{doc,man,lintian,bug} "$dest"/usr/src
find "$dest" -name '*.a' ! -name 'libgtest*.a' ! -name 'libgmock*.a' -delete

# Absolute symlinks would point at the GPU machine's own /usr: make them
# relative inside the folder.
while IFS= read -r link; do
  target=$(readlink "$link")
  case "$target" in
    /*) ln -sfn "$(realpath -m --relative-to="$(dirname "$link")" "$dest$target")" "$link" ;;
  esac
done < <(find "$dest" -type l)

# Debian's Gloo exports an absolute /usr/lib/libgloo.so path: make it
# relative to the config's own prefix.
sed -i 's|"/usr/lib/libgloo|"${_IMPORT_PREFIX}/lib/libgloo|g' "$dest"/usr/share/cmake/Gloo/*.cmake

# pkg-config files (gRPC finds re2 through one) name /usr (prefix=/usr,
# libdir=/usr/lib/...): make them the folder's own, wherever it lands.
sed -i 's|^\([a-z_]*\)=/usr\(/.*\)\?$|\1=${pcfiledir}/../../..\2|' "$dest"/usr/lib/x86_64-linux-gnu/pkgconfig/*.pc

# The private Gloo's source (cmake/Gloo.cmake builds it where LibTorch
# carries a Gloo of its own, as PyPI's wheels do): the GPU machine reaches
# no registry, so it travels too, checked against the hash CMake pins.
gloo_url=$(sed -n 's|^ *"\(http[^"]*gloo[^"]*\.tar\.xz\)"$|\1|p' "$repo/cmake/Gloo.cmake")
gloo_sha=$(sed -n 's|^set(DDPRUN_GLOO_SOURCE_SHA256 "\([0-9a-f]*\)"$|\1|p' "$repo/cmake/Gloo.cmake")
if [[ -z $gloo_url || -z $gloo_sha ]]; then
  echo "gpu-prepare: cannot read Gloo's source URL and hash from cmake/Gloo.cmake" >&2
  exit 1
fi
curl -fsSL --retry 3 -o "$dest/gloo-source.tar.xz" "$gloo_url"
echo "$gloo_sha  $dest/gloo-source.tar.xz" | sha256sum -c --quiet -

size_mib=$(du -sm "$dest" | cut -f1)
echo "gpu-prepare: $dest holds ${size_mib} MiB (limit ${limit_mib} MiB)"
if (( size_mib > limit_mib )); then
  echo "gpu-prepare: $dest is over ${limit_mib} MiB; the GPU machine takes at most 64 MiB of ignored files" >&2
  exit 1
fi
