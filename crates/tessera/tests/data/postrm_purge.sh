#!/usr/bin/env bash
# The Debian package's maintainer scripts (packaging/debian/postinst configure, postrm
# purge) on a node of their own: run by crates/tessera/tests/package.rs, as root, in a
# mount namespace of its own (`unshare --mount --propagation private`) where /etc is a
# copy of the machine's and /run, /dev/shm and /var are empty tmpfs — so that useradd,
# userdel and rm act on those and never on the machine's users, ledger or socket.
# Processes are the machine's (no pid namespace): the scripts see the holders below in
# /proc as they would on a node.
#
# usage: postrm_purge.sh REPO SCRATCH   (SCRATCH: a directory outside /etc, /run,
#                                        /dev/shm and /var, for the copy of /etc)
# Each scenario ends with lines "SCENARIO THING present|absent" for THING in ledger,
# records (the ledger's clients' directory), run-dir, user, group and record
# (/var/lib/tessera/created), and "SCENARIO group-id GID|none"; postrm's stderr is
# copied as "SCENARIO said: LINE".
set -euo pipefail
repo=$1 scratch=$2
ledger=/dev/shm/tessera-ledger

mkdir -p "$scratch"
cp -a /etc "$scratch/etc"
mount --bind "$scratch/etc" /etc
mount -t tmpfs -o mode=0755 tessera-test /run
mount -t tmpfs -o mode=1777 tessera-test /dev/shm
mount -t tmpfs -o mode=0755 tessera-test /var

# the processes that hold a ledger open, ended however this ends
holders=()
trap 'for h in "${holders[@]}"; do kill "$h" 2>/dev/null || true; done' EXIT
# hold FILE open (read), as uid 65534, until stopped: a live client of that ledger
hold() {
  setpriv --reuid 65534 --regid 65534 --clear-groups -- sleep 600 9<"$1" &
  holders+=("$!")
  # until the process is sleep, holding FILE (setpriv has exec'd)
  for _ in $(seq 100); do
    [ "$(readlink "/proc/$!/fd/9" 2>/dev/null)" = "$1" ] \
      && [ "$(cat "/proc/$!/comm" 2>/dev/null)" = sleep ] && return 0
    sleep 0.05
  done
  echo "the holder of $1 did not start" >&2
  exit 1
}
stop_holders() {
  for h in "${holders[@]}"; do kill "$h" 2>/dev/null || true; wait "$h" 2>/dev/null || true; done
  holders=()
}
# as tesserad makes them, as the tessera user: the ledger, its lock file, its clients'
# records (one of another user's: a client's), and systemd's runtime directory
daemon_leftovers() {
  install -o tessera -g tessera -m 0660 /dev/null "$ledger"
  install -o tessera -g tessera -m 0600 /dev/null "$ledger.daemon"
  install -d -o tessera -g tessera -m 0770 "$ledger.clients"
  install -o 65534 -g tessera -m 0660 /dev/null "$ledger.clients/1234abcd"
  install -d -o tessera -g tessera -m 0755 /run/tessera
  install -o tessera -g tessera -m 0600 /dev/null /run/tessera/tesserad.sock.lock
}
thing() { if [ -e "$2" ]; then echo "$1 $3 present"; else echo "$1 $3 absent"; fi; }
purge() {
  local scenario=$1 said
  said=$(sh "$repo/packaging/debian/postrm" purge 2>&1) || {
    echo "$scenario postrm failed: $said"
    exit 1
  }
  while IFS= read -r line; do [ -z "$line" ] || echo "$scenario said: $line"; done <<<"$said"
  thing "$scenario" "$ledger" ledger
  thing "$scenario" "$ledger.clients" records
  thing "$scenario" /run/tessera run-dir
  thing "$scenario" /var/lib/tessera/created record
  if getent passwd tessera >/dev/null; then echo "$scenario user present"; else echo "$scenario user absent"; fi
  if getent group tessera >/dev/null; then echo "$scenario group present"; else echo "$scenario group absent"; fi
  echo "$scenario group-id $(getent group tessera | cut -d: -f3 | grep . || echo none)"
}
# back to a node without tessera
reset() {
  stop_holders
  rm -rf "$ledger" "$ledger.daemon" "$ledger.clients" /run/tessera /var/lib/tessera
  if getent passwd tessera >/dev/null; then userdel tessera; fi
  if getent group tessera >/dev/null; then groupdel tessera; fi
}
configure() { sh "$repo/packaging/debian/postinst" configure; }

# another owner's live ledger at the package's path: it stays, though purge removes
# the rest (the runtime directory, the user and group it made)
configure
daemon_leftovers
rm -rf "$ledger" "$ledger.daemon" "$ledger.clients"
install -o 65534 -g 65534 -m 0600 /dev/null "$ledger"
hold "$ledger"
purge other-owners-live-ledger
reset

# the package's daemon's ledger, still open by a client: it stays
configure
daemon_leftovers
hold "$ledger"
purge in-use-ledger
reset

# the package's daemon's ledger, runtime directory, user and group, nobody using them:
# all go
configure
daemon_leftovers
purge unused
reset

# a site's own tessera user and group, made before the package: they stay
groupadd --system tessera
useradd --system --gid tessera --no-create-home --shell /usr/sbin/nologin tessera
configure
purge site-user-and-group
reset

# a site's own tessera group, and the user the package made in it: the user goes and
# the group stays, with its id (userdel alone would take it with the user)
groupadd --system tessera
echo "site-group group-id-before $(getent group tessera | cut -d: -f3)"
configure
purge site-group
reset
