#!/usr/bin/env bash
# The README's screenshot of `tessera top`: a daemon on 1 emulated GPU under fair
# queuing, two batch programs at weights 1:3 and a user-facing one (SLA 200 ms), top
# run under tmux, its screen captured with colours (`capture-pane -e`) and drawn as a
# PNG (an SVG of the terminal's cells, rendered by rsvg-convert).
#
# usage: scripts/screenshot-top.sh [OUT.png]   (default docs/img/tessera-top.png)
#   needs tmux and rsvg-convert (Debian: tmux, librsvg2-bin); TESSERA_BIN_DIR chooses
#   the built binaries (default target/debug, built when missing).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="${TESSERA_BIN_DIR:-$root/target/debug}"
out="${1:-$root/docs/img/tessera-top.png}"
work="$(mktemp -d)"
session="tessera-shot-$$"
cleanup() {
  tmux -L "$session" kill-server 2>/dev/null || true
  kill $(jobs -p) 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
[ -x "$bin/tessera" ] || (cd "$root" && cargo build -p tessera)

"$bin/tessera" daemon --emulate --gpus 1 --policy fair --socket "$work/d.sock" \
  --ledger "$work/ledger" 2>/dev/null &
for _ in $(seq 100); do [ -S "$work/d.sock" ] && break; sleep 0.1; done
job() { # class weight task_ms tasks
  printf '{"kernels":[{"name":"k","mean":%d}],"jobs":[{"arrival":0,"tenant":{"id":0,"class":%s,"weight":%d,"priority":0,"memory":0},"kernel":0,"tasks":[%s],"window":4,"submission":"window"}]}' \
    "$(($3 * 1000000))" "$1" "$2" "$(yes "$(($3 * 1000000))" | head -n "$4" | paste -sd,)"
}
job '{"class":"batch"}' 1 20 4000 > "$work/a.json"
job '{"class":"batch"}' 3 20 4000 > "$work/b.json"
job '{"class":"user_facing","sla":200000000}' 1 5 4000 > "$work/c.json"
for w in a b c; do
  "$bin/tessera" demo-client --socket "$work/d.sock" --workload "$work/$w.json" --job 0 \
    --speedup 1 --epoch-ms 0 >/dev/null 2>&1 &
done
tmux -L "$session" new-session -d -s top -x 150 -y 26 \
  "$bin/tessera top --socket $work/d.sock --interval 0.5"
sleep 14
tmux -L "$session" capture-pane -e -p -t top > "$work/screen.ansi"

python3 - "$work/screen.ansi" "$work/screen.svg" <<'EOF'
import re, sys, html
# the xterm 16 colours and 256-colour cube, as tmux writes them back
base = ["#000000", "#cd3131", "#0dbc79", "#e5e510", "#2472c8", "#bc3fbc", "#11a8cd", "#e5e5e5",
        "#666666", "#f14c4c", "#23d18b", "#f5f543", "#3b8eea", "#d670d6", "#29b8db", "#ffffff"]
def c256(n):
    if n < 16: return base[n]
    if n < 232:
        n -= 16; r, g, b = n // 36, n // 6 % 6, n % 6
        return "#%02x%02x%02x" % tuple(0 if v == 0 else 55 + 40 * v for v in (r, g, b))
    v = 8 + 10 * (n - 232); return "#%02x%02x%02x" % (v, v, v)
FG, BG = "#d4d4d4", "#1e1e1e"
cw, ch = 8.4, 17
cells = []
for y, line in enumerate(open(sys.argv[1], encoding="utf-8").read().split("\n")[:26]):
    fg, bg, bold, rev, x = FG, BG, False, False, 0
    for tok in re.split(r"(\x1b\[[0-9;]*m)", line):
        if tok.startswith("\x1b["):
            codes = [int(c) if c else 0 for c in tok[2:-1].split(";")]
            i = 0
            while i < len(codes):
                c = codes[i]
                if c == 0: fg, bg, bold, rev = FG, BG, False, False
                elif c == 1: bold = True
                elif c == 22: bold = False
                elif c == 7: rev = True
                elif c == 27: rev = False
                elif 30 <= c <= 37: fg = base[c - 30]
                elif 90 <= c <= 97: fg = base[c - 82]
                elif c == 39: fg = FG
                elif 40 <= c <= 47: bg = base[c - 40]
                elif 100 <= c <= 107: bg = base[c - 92]
                elif c == 49: bg = BG
                elif c in (38, 48) and i + 2 < len(codes) and codes[i + 1] == 5:
                    if c == 38: fg = c256(codes[i + 2])
                    else: bg = c256(codes[i + 2])
                    i += 2
                i += 1
            continue
        for chr_ in tok:
            f, b = (bg, fg) if rev else (fg, bg)
            cells.append((x, y, chr_, f, b, bold)); x += 1
W, H = int(150 * cw) + 16, 26 * ch + 16
svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}">',
       f'<rect width="100%" height="100%" fill="{BG}"/>',
       '<g font-family="DejaVu Sans Mono, monospace" font-size="14">']
for x, y, c, f, b, bold in cells:
    px, py = 8 + x * cw, 8 + y * ch
    if b != BG:
        svg.append(f'<rect x="{px:.1f}" y="{py}" width="{cw + 0.5:.1f}" height="{ch}" fill="{b}"/>')
    if c.strip():
        w = ' font-weight="bold"' if bold else ''
        svg.append(f'<text x="{px:.1f}" y="{py + 13}" fill="{f}"{w}>{html.escape(c)}</text>')
svg.append("</g></svg>")
open(sys.argv[2], "w").write("\n".join(svg))
EOF
mkdir -p "$(dirname "$out")"
rsvg-convert "$work/screen.svg" -o "$out"
echo "wrote $out" >&2
