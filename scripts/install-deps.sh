#!/usr/bin/env bash
# Installs everything bulwark needs to build and test on Debian 12 (run as root).
# Idempotent: packages already present are left alone.
set -euo pipefail

packages=(
  # toolchain
  cmake ninja-build g++ clang-14 libclang-rt-14-dev clang-format git ca-certificates pkgconf
  # tests and benchmarks
  libgtest-dev libgmock-dev libbenchmark-dev librapidcheck-dev
  # integrations and the command-line lab
  libcli11-dev libtomlplusplus-dev nlohmann-json3-dev libcpp-httplib-dev libfmt-dev libasio-dev
  libhiredis-dev redis-server redis-tools libcurl4-openssl-dev prometheus-cpp-dev
  # the Prometheus exposition is checked by the real tools
  prometheus python3 python3-prometheus-client
  # the .deb (packaging_deb): CPack's DEB generator reads ELF files with `file` and
  # computes Depends with dpkg-shlibdeps (dpkg-dev)
  dpkg-dev file
  # the measurement commands in docs/performance.md and docs/lab.md (/usr/bin/time, callgrind)
  time valgrind
  # the commands of docs/getting-started.md (packaging_getting_started)
  curl
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
