#!/usr/bin/env bash
# kiln-studio in a real window: under Xvfb with Qt's xcb platform (not the
# offscreen one the QTest suite uses), opened on a measured report at the
# timeline view; the X server's screen is grabbed (Pillow's ImageGrab) and
# must show the window: many colours, the tab bar's grey and the
# kernels' blue, and the process still running (no crash on a real display).
# usage: real_window.sh KILN_STUDIO WORKDIR REPORT.json   (exit 77: no xvfb-run)
set -u
studio=$1 W=$2 report=$3
command -v xvfb-run >/dev/null || { echo "skip: no xvfb-run (apt-get install xvfb)"; exit 77; }
rm -rf "$W" && mkdir -p -m 700 "$W/xdg"
xvfb-run -a -s "-screen 0 1400x900x24" sh -c '
  XDG_RUNTIME_DIR="$1/xdg" QT_QPA_PLATFORM=xcb "$2" "$3" --view timeline >"$1/studio.log" 2>&1 &
  pid=$!
  sleep 6
  /usr/bin/python3 -c "from PIL import ImageGrab; ImageGrab.grab().save(\"$1/screen.png\")" || exit 3
  kill -0 $pid 2>/dev/null || { echo "kiln-studio exited early"; exit 4; }
  kill $pid; wait $pid 2>/dev/null; exit 0' sh "$W" "$studio" "$report" || { echo "FAIL: xvfb run: $(cat "$W/studio.log")"; exit 1; }
/usr/bin/python3 - "$W/screen.png" <<'PYEOF' || { echo "FAIL: the screen shows no kiln-studio window"; exit 1; }
import sys
from PIL import Image
im = Image.open(sys.argv[1]).convert("RGB")
assert im.size == (1400, 900), im.size
colours = im.getcolors(1 << 20)
assert colours and len(colours) > 50, len(colours or [])
blue = sum(n for n, c in colours if c == (0x4e, 0x79, 0xa7))  # the timeline's kernels
assert blue > 100, blue
PYEOF
echo "ok   kiln-studio drew its timeline in a real X window ($W/screen.png)"
