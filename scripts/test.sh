#!/usr/bin/env bash
# The one test command: unit tests, integration tests on real FUSE mounts, pjdfstest and fsx.
# Needs root (mounts), /dev/fuse, and the tools it installs below when they are missing.
set -euo pipefail
cd "$(dirname "$0")/.."

export PATH="$HOME/.cargo/bin:$PATH"
command -v pjdfstest >/dev/null && command -v fsx >/dev/null || cargo install --locked pjdfstest fsx
# pjdfstest switches to these users; Debian's nobody has the group nogroup.
id tests >/dev/null 2>&1 || useradd --no-create-home --user-group tests
id nobody >/dev/null 2>&1 || useradd --no-create-home nobody

# Fault points compiled in: tests/faultpoints.rs crashes and fails the daemon at each of them.
cargo test --workspace --features failpoints "$@"
