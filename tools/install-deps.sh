#!/bin/sh
# Installs what the build needs on a fresh Debian machine (when run as root):
# cmake, gcc, make and libcjson-dev; otherwise says exactly what to install.
# Called by `make`.
need=""
command -v cmake >/dev/null 2>&1 || need="$need cmake"
command -v cc >/dev/null 2>&1 || need="$need gcc"
command -v make >/dev/null 2>&1 || need="$need make"
# cJSON: the tuning cache and config.json parsing (a REQUIRED dependency)
if ! dpkg-query -W -f='${Status}' libcjson-dev 2>/dev/null | grep -q "install ok installed" &&
  [ ! -f /usr/include/cjson/cJSON.h ]; then
  need="$need libcjson-dev"
fi
[ -z "$need" ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "dsk: installing:$need"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $need
else
  echo "dsk: missing build tools:$need; run: sudo apt-get install -y$need" >&2
  exit 1
fi
