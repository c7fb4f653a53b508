#!/bin/sh
# /etc/slurm/tessera-taskprolog.sh: Slurm's TaskProlog for tessera (docs/slurm.md). slurm.conf:
#   TaskProlog=/etc/slurm/tessera-taskprolog.sh
exec /usr/bin/tessera slurm task-prolog --socket /run/tessera/tesserad.sock
