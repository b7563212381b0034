#!/usr/bin/env bash
# Installs what tandem needs to build and test on Debian 12 (bookworm). Uses sudo when not root. The Vulkan
# packages give the Vulkan backend its loader, headers and shader compiler, and the tests a Vulkan device without a
# GPU (Mesa's lavapipe) with the validation layer.
#   --cpus  also what scripts/test-cpus.sh needs: qemu-user, the AArch64 cross compiler and the arm64 libraries
set -euo pipefail
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends \
  g++ cmake ninja-build pkg-config git ca-certificates \
  libgtest-dev libgmock-dev nlohmann-json3-dev libboost-dev zlib1g-dev libpcre2-dev \
  clang libclang-rt-14-dev clang-format-14 chromium haproxy \
  libopenmpi-dev openmpi-bin \
  libvulkan-dev glslc mesa-vulkan-drivers vulkan-validationlayers spirv-tools >/dev/null
# Node.js for the server tests (the machine image usually has a recent one; Debian's otherwise).
if ! command -v node >/dev/null 2>&1; then
  $SUDO apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
fi
if [ "${1:-}" = "--cpus" ]; then
  # arm64 -dev packages through Debian multiarch: the cross build links them and qemu-aarch64 runs with them
  # (libstdc++6:arm64 too: the -dev packages do not pull it in, and without it the emulated tests cannot start)
  $SUDO dpkg --add-architecture arm64
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends qemu-user g++-aarch64-linux-gnu binutils-aarch64-linux-gnu \
    libpcre2-dev:arm64 libgtest-dev:arm64 libstdc++6:arm64 python3 >/dev/null
fi
cd "$(dirname "$0")/.."
npm ci --prefix tests/server --no-audit --no-fund >/dev/null
# the real chat templates the Jinja conformance test renders (outside the repository)
bash scripts/fetch-chat-templates.sh
echo "dependencies installed"
