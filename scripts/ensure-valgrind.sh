#!/usr/bin/env bash
# Make valgrind (Debian's) available for the instruction-count scripts
# (sim-instructions.sh, interposer-instructions.sh): installed with apt-get when missing
# and root; otherwise a clear failure.
set -euo pipefail
if ! command -v valgrind >/dev/null; then
  if [ "$(id -u)" = 0 ]; then
    echo "installing valgrind from Debian" >&2
    apt-get install -y -q valgrind >&2
  else
    echo "valgrind is not installed (apt-get install valgrind)" >&2
    exit 1
  fi
fi
