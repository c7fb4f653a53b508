#!/bin/sh
# /etc/slurm/tessera-epilog.sh: Slurm's Epilog for tessera (docs/slurm.md). slurm.conf:
#   Epilog=/etc/slurm/tessera-epilog.sh
exec /usr/bin/tessera slurm epilog --socket /run/tessera/tesserad.sock
