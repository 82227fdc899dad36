"""Take the screenshots of docs/viewer.md: `turnlog demo` into a temporary store, `turnlog serve`
on 127.0.0.1, and Debian's headless Chromium (Playwright) on each page.

    python scripts/viewer_screenshots.py [--chromium /usr/bin/chromium]

Writes docs/img/viewer-*.png.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "img"

SHOTS = [
    ("viewer-sessions.png", "/", None),
    ("viewer-timeline.png", "/sessions/demo-summary?limit=30", None),
    ("viewer-view.png", "/sessions/demo-summary/view", None),
    ("viewer-time-travel.png", "/sessions/demo-summary/view?at=14", None),
    ("viewer-diff.png", "/sessions/demo-summary/diff?a=37&b=38", None),
    ("viewer-files.png", "/sessions/demo-files/view", None),
]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "demo.db"
        turnlog = [sys.executable, "-m", "turnlog.cli", "--db", str(db)]
        subprocess.run([*turnlog, "demo"], env=env, check=True, stdout=subprocess.DEVNULL)
        port = _port()
        server = subprocess.Popen([*turnlog, "serve", "--port", str(port)], env=env)
        base = f"http://127.0.0.1:{port}"
        try:
            for _ in range(300):
                try:
                    urllib.request.urlopen(base + "/api/sessions?limit=1", timeout=1).close()
                    break
                except OSError:
                    time.sleep(0.1)
            OUT.mkdir(parents=True, exist_ok=True)
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=args.chromium)
                page = browser.new_page(viewport={"width": 1200, "height": 900})
                for name, path, _ in SHOTS:
                    page.goto(base + path)
                    if name == "viewer-timeline.png":
                        page.locator("details.fold summary").first.click()
                    page.screenshot(path=str(OUT / name), full_page=False)
                    print(f"wrote docs/img/{name}")
                browser.close()
        finally:
            server.terminate()
            server.wait(timeout=10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
