"""Which Chromium the browser tests drive: one lookup for tests/ui, `make test-ui` and `.ci/run`.

`$CHROMIUM` when set, else `chromium` (Debian's package) or `chromium-browser` on the PATH. Playwright
drives it as installed; `playwright install` would download a browser of its own instead.

`python -m tests.ui.chromium [--install]` prints the path it finds and exits 0, else says why on stderr
and exits 1. With `--install`, a missing chromium is first installed from the Debian packages (as root, or
through `sudo -n`), refreshing the package lists when the first attempt fails (a fresh machine has none).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys

VARIABLE = "CHROMIUM"
NAMES = ("chromium", "chromium-browser")
INSTALL_HINT = "apt-get install chromium (make test-ui does it as root), or point CHROMIUM at one"


class ChromiumNotFound(RuntimeError):
    """No usable Chromium: `$CHROMIUM` names no executable, or none is on the PATH."""


def required() -> bool:
    """Whether a Chromium was asked for by name (`$CHROMIUM`, as `.ci/run` sets it): the browser tests then
    fail without one, or without Playwright, instead of skipping."""
    return bool(os.environ.get(VARIABLE))


def find_chromium() -> str:
    """The Chromium executable to drive.

    Raises:
        ChromiumNotFound: `$CHROMIUM` is set but names no executable file, or it is unset and no name of
            NAMES is on the PATH.
    """
    chosen = os.environ.get(VARIABLE)
    if chosen:
        path = shutil.which(chosen)  # a bare name resolves on the PATH, a path must be an executable file
        if path is None:
            raise ChromiumNotFound(f"{VARIABLE}={chosen}: expected an executable Chromium, found none there")
        return path
    for name in NAMES:
        path = shutil.which(name)
        if path is not None:
            return path
    raise ChromiumNotFound(f"no {' or '.join(NAMES)} on the PATH and {VARIABLE} unset: {INSTALL_HINT}")


def install_command() -> list[str] | None:
    """apt-get as root, else through passwordless sudo; None when neither can install packages."""
    if shutil.which("apt-get") is None:
        return None
    if os.geteuid() == 0:
        return ["apt-get"]
    if shutil.which("sudo") and subprocess.run(["sudo", "-n", "true"], capture_output=True,
                                               check=False).returncode == 0:  # no password asked
        return ["sudo", "-n", "apt-get"]
    return None


def install_chromium() -> None:
    """Installs Debian's chromium; its output goes to stderr, so that stdout carries only the path."""
    apt = install_command()
    if apt is None:
        raise ChromiumNotFound(f"cannot install chromium (needs apt-get, as root or by sudo): {INSTALL_HINT}")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = [*apt, "install", "-y", "chromium"]
    print(f"installing chromium: {' '.join(install)}", file=sys.stderr, flush=True)
    if subprocess.run(install, stdout=sys.stderr, env=env, check=False).returncode == 0:
        return
    # A clean machine's package lists can be empty or stale: refresh them once and try again.
    subprocess.run([*apt, "update"], stdout=sys.stderr, env=env, check=False)
    if subprocess.run(install, stdout=sys.stderr, env=env, check=False).returncode != 0:
        raise ChromiumNotFound(f"`{' '.join(install)}` failed (its output is above)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.ui.chromium", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--install", action="store_true", help="install Debian's chromium when none is found")
    args = parser.parse_args(argv)
    try:
        try:
            path = find_chromium()
        except ChromiumNotFound:
            if not args.install or required():  # an explicit $CHROMIUM is not replaced by another browser
                raise
            install_chromium()
            path = find_chromium()
    except ChromiumNotFound as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
