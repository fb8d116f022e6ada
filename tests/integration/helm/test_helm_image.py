"""The container image: the Dockerfile agrees with the chart, and its build
context (what .dockerignore lets through) installs a working `gpulse serve`.

Where no container engine answers, the image itself is not built; the steps it
runs are: build the package from the context alone, install it, and run the
entrypoint as the image's user. Where one answers (`docker info` or `podman
info`), `make image` builds it and it must start the way the chart runs it.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, free_port, wait_http

CHART = ROOT / "helm" / "gpulse"


def dockerfile() -> dict[str, list[str]]:
    """Instruction -> its arguments, in order (continuation lines joined)."""
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.setdefault(word.upper(), []).append(rest.strip())
    return out


def image_user() -> tuple[int, int]:
    user, _, group = dockerfile()["USER"][-1].partition(":")
    assert user.isdigit(), "a numeric USER lets Kubernetes verify runAsNonRoot"
    return int(user), int(group or user)


def test_dockerfile_matches_the_chart():
    from gpulse.config import DEFAULT_PORT
    d = dockerfile()
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert len(d["FROM"]) >= 2, "multi-stage: build in one image, ship a slim one"
    assert all("python:" in f and "-slim" in f for f in d["FROM"])
    assert json.loads(d["ENTRYPOINT"][-1]) == ["gpulse", "serve"]
    assert d["EXPOSE"][-1] == str(DEFAULT_PORT) == str(values["containerPort"])
    uid, gid = image_user()
    assert uid != 0
    assert uid == values["podSecurityContext"]["runAsUser"]
    assert gid == values["podSecurityContext"]["runAsGroup"]


def test_extras_the_image_installs_exist():
    extras = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"].get("optional-dependencies", {}))
    wanted = {e for run in dockerfile()["RUN"] for group in re.findall(r'"\.\[([\w,-]+)\]"', run)
              for e in group.split(",")}
    assert wanted, "the Dockerfile installs the package with its extras"
    assert wanted <= extras, f"pyproject.toml lacks the extras {sorted(wanted - extras)} the image installs"


def test_make_image_runs_docker_build():
    if shutil.which("make") is None:
        pytest.skip("make not installed")
    # under `make test` the outer make's variables would make this one print directory lines
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    out = subprocess.run(["make", "--no-print-directory", "-n", "image", "IMAGE=registry.example.com/gpulse:test"],
                         cwd=ROOT, capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["docker", "build", "-t", "registry.example.com/gpulse:test", "."]


# ------------------------------------------------------------------ the build context

def _dockerignore() -> list[tuple[bool, re.Pattern]]:
    """(exclude?, regex) per line, in order; Docker applies the last match."""
    rules = []
    for line in (ROOT / ".dockerignore").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        pattern = line[1:] if negate else line
        assert not re.search(r"[\[\]\\]", pattern), f"{pattern!r}: syntax this test does not model"
        rx = re.escape(pattern.strip("/")).replace(r"\*\*/", "(?:.*/)?").replace(r"\*\*", ".*")
        rx = rx.replace(r"\*", "[^/]*").replace(r"\?", "[^/]")
        rules.append((not negate, re.compile(rx + "$")))
    return rules


def _excluded(rel: str, rules) -> bool:
    # A pattern matching a parent folder matches everything under it.
    parts = rel.split("/")
    prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    excluded = False
    for exclude, rx in rules:
        if any(rx.match(p) for p in prefixes):
            excluded = exclude
    return excluded


def build_context(dest: Path) -> Path:
    rules = _dockerignore()
    tracked = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout.split()
    for rel in tracked:
        src = ROOT / rel
        if src.is_file() and not _excluded(rel, rules):
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    return dest


def test_build_context_holds_only_the_package(tmp_path):
    ctx = build_context(tmp_path / "ctx")
    top = sorted(p.name for p in ctx.iterdir())
    assert top == ["README.md", "exporter", "pyproject.toml"], top
    assert not list(ctx.rglob("__pycache__"))
    # Every file the Dockerfile copies is in the context.
    for copy in dockerfile()["COPY"]:
        if copy.startswith("--from"):
            continue
        for src in copy.split()[:-1]:
            assert (ctx / src).exists(), f"COPY {src}: not in the build context"


def test_image_recipe_installs_a_working_gpulse_serve(tmp_path):
    """pip-build the package from the build context alone, install it apart from
    the checkout into a virtualenv of its own, and run the image's entrypoint."""
    ctx = build_context(tmp_path / "ctx")
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    "-w", str(wheels), str(ctx)], check=True, timeout=300, capture_output=True)
    (wheel,) = wheels.glob("gpulse-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        entry_points = next(z.read(n).decode() for n in names if n.endswith("entry_points.txt"))
    assert re.search(r"^gpulse\s*=\s*gpulse\.cli:main$", entry_points, re.M)
    # Every module of the checkout and every package-data file ships.
    package = ROOT / "exporter" / "gpulse"
    data_globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"] \
        .get("package-data", {}).get("gpulse", [])
    wanted = {p for p in package.rglob("*.py") if "__pycache__" not in p.parts}
    wanted |= {p for g in data_globs for p in package.glob(g) if p.is_file()}
    missing = sorted(str(p.relative_to(package.parent)) for p in wanted
                     if str(p.relative_to(package.parent)) not in names)
    assert not missing, f"not in the wheel built from the image's context: {missing}"

    # Like the image: a virtualenv of its own with the wheel installed into it.
    # Its dependencies come from this environment's site-packages through a .pth
    # line, which (unlike a site folder) does not pull in the checkout's
    # editable install, so only the wheel can provide `gpulse`.
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    (site,) = venv.glob("lib/python*/site-packages")
    deps = next(p for p in map(Path, sys.path) if p.name == "site-packages" and (p / "prometheus_client").is_dir())
    (site / "deps.pth").write_text(f"{deps}\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "--quiet",
                    "--no-deps", str(wheel)], check=True, timeout=300, capture_output=True)

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(PATH=f"{venv / 'bin'}:{env.get('PATH', '')}", PYTHONDONTWRITEBYTECODE="1", HOME="/nonexistent")
    where = subprocess.run(["python", "-c", "import gpulse; print(gpulse.__file__)"],
                           env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert where.returncode == 0, where.stderr
    assert Path(where.stdout.strip()).is_relative_to(site), "the installed copy, not the checkout, must run"

    # ENTRYPOINT ["gpulse", "serve"] with chart-style flags.
    port = free_port()
    cmd = ["gpulse", "serve", "--source=sim", "--sim.gpus=2",
                   f"--web.listen-address=127.0.0.1:{port}", "--log.format=json"]
    proc = subprocess.Popen(cmd, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_http(f"http://127.0.0.1:{port}/readyz", timeout=30)
        import requests
        assert "gpulse_gpu_up" in requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    finally:
        proc.terminate()
        try:
            out, _ = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
    assert "Traceback" not in out, out


def _engine() -> str | None:
    """A container engine that answers, or None (a client without a daemon is none)."""
    for name in ("docker", "podman"):
        exe = shutil.which(name)
        if exe and subprocess.run([exe, "info"], capture_output=True, timeout=60).returncode == 0:
            return exe
    return None


def test_built_image_starts_as_the_chart_runs_it():
    """`make image`, then the image as the chart runs it (user 10001, read-only
    root filesystem, no capability, a writable /tmp): `--help` answers and
    `--source=sim` serves /metrics."""
    import requests
    engine = _engine()
    if engine is None:
        pytest.skip("no container engine answers here (docker info, podman info)")
    tag = f"gpulse-test:{os.getpid()}"
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    build = subprocess.run(["make", "--no-print-directory", "image", f"IMAGE={tag}", f"DOCKER={engine}"],
                           cwd=ROOT, capture_output=True, text=True, timeout=1200, env=env)
    assert build.returncode == 0, build.stdout[-2000:] + build.stderr[-2000:]
    run = [engine, "run", "--rm", "--read-only", "--tmpfs", "/tmp", "--cap-drop=ALL",
           "--security-opt=no-new-privileges"]
    container = None
    try:
        helped = subprocess.run(run + [tag, "--help"], capture_output=True, text=True, timeout=120)
        assert helped.returncode == 0 and "--source" in helped.stdout, helped.stderr
        port = free_port()
        started = subprocess.run(run + ["-d", "-p", f"127.0.0.1:{port}:9479", tag, "--source=sim"],
                                 capture_output=True, text=True, timeout=120)
        assert started.returncode == 0, started.stderr
        container = started.stdout.strip()
        wait_http(f"http://127.0.0.1:{port}/readyz", timeout=60)
        assert "gpulse_gpu_up" in requests.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
        uid = subprocess.run([engine, "exec", container, "id", "-u"], capture_output=True, text=True, timeout=60)
        assert uid.stdout.strip() == str(image_user()[0])
    finally:
        if container:
            subprocess.run([engine, "rm", "-f", container], capture_output=True, timeout=120)
        subprocess.run([engine, "rmi", "-f", tag], capture_output=True, timeout=120)
