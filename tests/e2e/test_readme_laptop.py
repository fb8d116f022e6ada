"""The first hour on a laptop, as the README tells it: a fresh copy of the repository,
`make demo`, then the "Running it" commands copied in order. Nothing is rewritten:
the only difference from a person at a terminal is the listen address, given through
the environment (GPULSE_WEB_LISTEN_ADDRESS) so the test never takes port 9479."""
from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
import requests

from conftest import ROOT, Gpulse, free_port, require_binary
from gpulse.cli import build_parser

LISTENING = re.compile(r"listening on (https?://\S+/) ")


def running_it_blocks() -> list[list[str]]:
    """The ```sh blocks of README's "## Running it", as lists of command lines."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("\n## Running it\n", 1)[1].split("\n### ", 1)[0].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, re.S)
    return [[ln for ln in b.splitlines() if ln.strip()] for b in blocks]


class Output:
    """The output of a running process, read line by line on a thread."""

    def __init__(self, p: subprocess.Popen):
        self.p = p
        self.lines: list[str] = []
        self._t = threading.Thread(target=lambda: self.lines.extend(ln.rstrip("\n") for ln in self.p.stdout),
                                   daemon=True)
        self._t.start()

    def url(self, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for ln in list(self.lines):
                m = LISTENING.search(ln)
                if m:
                    return m.group(1)
            if self.p.poll() is not None:
                break
            time.sleep(0.1)
        raise AssertionError("no 'listening on URL' line:\n" + "\n".join(self.lines[-30:]))


class Proc(Output):
    """A shell command in its own process group."""

    def __init__(self, cmd: str, cwd: Path, env: dict):
        super().__init__(subprocess.Popen(["bash", "-c", cmd], cwd=cwd, env=env, stdout=subprocess.PIPE,
                                          stderr=subprocess.STDOUT, text=True, start_new_session=True))

    def interrupt(self) -> int:
        """Ctrl-C, as a person at the terminal would press it."""
        if self.p.poll() is None:
            os.killpg(self.p.pid, signal.SIGINT)
            try:
                self.p.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.p.pid, signal.SIGKILL)
                self.p.wait()
        self._t.join(10)
        return self.p.returncode


def fresh_copy(dest: Path) -> Path:
    """What a clone would hold: the files git tracks, as they are in the working tree."""
    git = require_binary("git")
    try:
        files = subprocess.run([git, "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    except subprocess.CalledProcessError:
        pytest.skip("not a git checkout")
    for rel in filter(None, files.decode().split("\0")):
        src, dst = ROOT / rel, dest / rel
        if not src.exists() and not src.is_symlink():   # deleted in the working tree
            continue
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            dst.symlink_to(os.readlink(src))
        else:
            shutil.copy2(src, dst)
    return dest


def shell_env(port: int) -> dict:
    drop = ("PYTHONPATH", "VIRTUAL_ENV", "MAKEFLAGS", "MFLAGS", "MAKELEVEL")
    env = {k: v for k, v in os.environ.items() if k not in drop and not k.startswith("GPULSE_")}
    venv_bin = str(ROOT / ".venv" / "bin")
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != venv_bin)
    env["GPULSE_WEB_LISTEN_ADDRESS"] = f"127.0.0.1:{port}"
    return env


def check_serving(url: str) -> None:
    page = requests.get(url, timeout=10)
    assert page.status_code == 200 and "text/html" in page.headers["Content-Type"], page.status_code
    deadline = time.monotonic() + 30
    while "gpulse_gpu_busy_seconds_total" not in (m := requests.get(url + "metrics", timeout=10).text):
        assert time.monotonic() < deadline, m[-2000:]
        time.sleep(0.2)


def test_make_demo_then_running_it_in_order(tmp_path):
    require_binary("make")
    clone = fresh_copy(tmp_path / "gpulse")
    port = free_port()
    env = shell_env(port)

    demo = Proc("make demo", clone, env)
    try:
        url = demo.url(timeout=600)           # creates .venv and pip-installs first
        assert url == f"http://127.0.0.1:{port}/"
        said = "\n".join(demo.lines)
        assert said.index("installing gpulse") < said.index("listening on"), said   # not a silent pip
        check_serving(url)
    finally:
        demo.interrupt()
    assert not any("Traceback" in ln for ln in demo.lines), demo.lines

    first, later = running_it_blocks()
    assert first[0].startswith(". .venv/bin/activate"), first
    activate = first[0]
    for line in first[1:]:
        cmd = f"{activate}\n{line}"
        if line.startswith("gpulse serve"):
            p = Proc(cmd, clone, env)
            try:
                check_serving(p.url(timeout=60))
            finally:
                rc = p.interrupt()
            assert rc == 0 and not any("Traceback" in ln for ln in p.lines), (line, rc, p.lines[-10:])
        else:
            r = subprocess.run(["bash", "-c", cmd], cwd=clone, env=env, capture_output=True, text=True, timeout=60)
            assert r.returncode == 0, (line, r.stdout, r.stderr)
            if "check-config" in line:
                assert "OK" in r.stdout, r.stdout

    # the commands that need hardware or a recording: every flag in them exists
    for line in later:
        args = shlex.split(line, comments=True)
        assert args[:2] == ["gpulse", "serve"], line
        build_parser().parse_args(args[1:])


@pytest.mark.parametrize("tls", [False, True])
def test_startup_log_prints_the_url_to_open(tmp_path, tls):
    """`listening on http://127.0.0.1:PORT/` (https with TLS): a URL a terminal makes
    clickable, that answers when followed."""
    args = ["--source", "sim", "--sim.gpus", "2"]
    verify: str | bool = True
    if tls:
        from tlsutil import CA, write_web_config
        ca = CA(tmp_path)
        server = ca.issue("127.0.0.1", server=True)
        wc = write_web_config(tmp_path / "web.yml", {"tls_server_config": {
            "cert_file": str(server.cert), "key_file": str(server.key)}})
        args += ["--web.config.file", str(wc)]
        verify = str(ca.path)
    # all interfaces, as a laptop user would run it: the line shows the loopback address
    g = Gpulse(*args, "--web.listen-address", ":0", ready=False, timeout=30)
    try:
        url = g.url + "/"
        assert re.fullmatch(rf"{'https' if tls else 'http'}://127\.0\.0\.1:\d+/", url), g.lines
        assert any(f"listening on {url} " in ln for ln in g.lines), g.lines      # the URL stands alone
        assert requests.get(url, timeout=10, verify=verify).status_code == 200
    finally:
        g.stop()
