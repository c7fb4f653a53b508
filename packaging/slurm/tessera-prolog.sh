#!/bin/sh
# /etc/slurm/tessera-prolog.sh: Slurm's Prolog for tessera (docs/slurm.md). slurm.conf:
#   Prolog=/etc/slurm/tessera-prolog.sh
exec /usr/bin/tessera slurm prolog --socket /run/tessera/tesserad.sock
