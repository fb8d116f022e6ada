"""`make bench` installs gpulse alone (pyproject's four dependencies, no test extra)
and runs bench/scrape_latency.py, whose helpers (bench/lib/proc.py) share the tests'
free_port (testing/daemons.py): neither may need pytest or another extra to import."""
from __future__ import annotations

import subprocess
import sys
import textwrap

from conftest import ROOT

# the top-level modules of what the [test] extra and the optional extras install
EXTRAS_ONLY = ("pytest", "_pytest", "xdist", "hypothesis", "cryptography", "jsonschema", "selenium", "grpc",
               "grpc_tools", "google", "kubernetes_validate", "cloudcoil", "filelock", "pyarrow", "bcrypt",
               "grafana_foundation_sdk")


def test_make_bench_starts_on_the_base_install():
    script = textwrap.dedent(f"""
        import importlib.abc, runpy, sys
        class Missing(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in {EXTRAS_ONLY!r}:
                    raise ModuleNotFoundError(f"No module named {{name!r}} (not in the base install)")
        sys.meta_path.insert(0, Missing())
        sys.argv = ["bench/scrape_latency.py", "--help"]
        runpy.run_path("bench/scrape_latency.py", run_name="__main__")
    """)
    p = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60,
                       env={"PYTHONPATH": str(ROOT / "exporter"), "PATH": "/usr/bin:/bin"})
    assert p.returncode == 0 and "usage: scrape_latency.py" in p.stdout, p.stderr[-2000:]
