#!/usr/bin/env bash
# Installs what building and testing needs on a fresh Debian 12 machine:
# PostgreSQL 15 with server headers, sudo, clang (for pgrx bindings) and
# cargo-pgrx 0.18.0. Idempotent: what is present is not installed again.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/env.sh"

need_apt=()
for pkg in postgresql-15 postgresql-server-dev-15 sudo clang libclang-dev pkg-config; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need_apt+=("$pkg")
done
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "setup: installing ${need_apt[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

if ! cargo pgrx --version 2>/dev/null | grep -q "0.18.0"; then
  echo "setup: installing cargo-pgrx 0.18.0 (takes a few minutes)"
  cargo install cargo-pgrx --version 0.18.0 --locked
fi
if [ ! -f "$HOME/.pgrx/config.toml" ] || ! grep -q "pg15" "$HOME/.pgrx/config.toml"; then
  cargo pgrx init --pg15 "$PG_CONFIG"
fi

mkdir -p "$MMV_STATE"
chmod 755 "$MMV_STATE"
