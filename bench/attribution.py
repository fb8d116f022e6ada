"""/metrics latency with attribution on against attribution off, at 8 and 56 entities.

    .venv/bin/python bench/attribution.py [--scrapes 1000] [--rounds 5] [--entities 8,56] [--refresh 1s]

Attribution on: a fake node (real gRPC PodResources server on a unix socket, real
HTTPS API server with a token and its own CA, see testing/fakekube.py, in a child
process) with every entity assigned to a pod, refreshed every second by default
(10x the default kube.refresh_interval), optionally with copied pod labels. 56 entities stands for a MIG-heavy node (8 GPUs x 7 instances);
the simulated source exposes them as 56 whole GPUs, which costs attribution the same
(one key lookup per entity per analysis tick).

Both servers run side by side on the same data and are scraped alternately, one
request each, so load from elsewhere on the machine hits both alike. The target is p99(on) within 10 % of
p99(off). Also printed, measured in this process: the cost of one lookup() and of
one refresh (kubelet List + API pod list over TLS) at each size.
"""
from __future__ import annotations

import argparse
import http.client
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from urllib.parse import urlsplit

import requests

from bench.lib.proc import ROOT, percentile, start_gpulse

sys.path.insert(0, str(ROOT / "exporter"))
sys.path.insert(0, str(ROOT))          # testing/

from testing.config import test_config  # noqa: E402
from gpulse.attribution import make_attributor  # noqa: E402
from testing.fakekube import FakeApiServer, FakeCluster, FakeKubelet, FakePod  # noqa: E402
from gpulse.sources.sim import SimSource  # noqa: E402

NODE = "bench-node"
GPUS_PER_POD = {8: 4, 56: 2}   # two 4-GPU jobs; 28 small pods on the MIG-heavy node
# spawn, not fork: the parent has grpc loaded, which does not survive a fork.
mp = multiprocessing.get_context("spawn")


def node_pods(n: int) -> list[FakePod]:
    devices = SimSource(test_config(sim__gpus=n)).open()
    per = GPUS_PER_POD.get(n, 2)
    return [FakePod(name=f"job{p // per}-worker-0", namespace="bench", node=NODE,
                    devices={"trainer": {"nvidia.com/gpu": [d.uuid for d in devices[p:p + per]]}},
                    labels={"training.kubeflow.org/job-name": f"job{p // per}",
                            "team": "bench", "app.kubernetes.io/name": "trainer"})
            for p in range(0, n, per)]


def serve_node(n: int, workdir: str, conn) -> None:
    """Child process: the fake kubelet and API server. They run apart from the
    timing loop so serving them never delays the client that measures."""
    cluster = FakeCluster(node_pods(n))
    sa = os.path.join(workdir, f"sa{n}")
    os.mkdir(sa)
    kubelet = FakeKubelet(cluster, os.path.join(workdir, f"kubelet{n}.sock"), node=NODE)
    api = FakeApiServer(cluster, sa)
    conn.send({"socket": kubelet.socket_path, "host": api.host, "port": api.port, "sa_dir": sa,
               "token_path": api.token_path, "ca_path": api.ca_path})
    conn.recv()   # until the parent is done
    api.stop()
    kubelet.stop()


class Client:
    """One kept-alive connection read with http.client: far less client-side work
    per byte than requests, so the figures are the server's, not the parser's."""

    def __init__(self, url: str, headers: dict[str, str]):
        u = urlsplit(url)
        self.path = u.path or "/"
        self.headers = headers
        self.conn = http.client.HTTPConnection(u.hostname, u.port, timeout=5)

    def scrape_ms(self) -> float:
        t0 = time.perf_counter()
        self.conn.request("GET", self.path, headers=self.headers)
        r = self.conn.getresponse()
        r.read()
        ms = (time.perf_counter() - t0) * 1000
        if r.status != 200:
            raise SystemExit(f"{self.path}: HTTP {r.status}")
        return ms


def paired(off_url: str, on_url: str, n: int, headers: dict[str, str]) -> tuple[list[float], list[float]]:
    """n scrapes of each server, alternating one by one (and which goes first), so
    both see the same moments of a busy machine."""
    c_off, c_on = Client(off_url, headers), Client(on_url, headers)
    off: list[float] = []
    on: list[float] = []
    for i in range(n):
        if i % 2:
            on.append(c_on.scrape_ms())
            off.append(c_off.scrape_ms())
        else:
            off.append(c_off.scrape_ms())
            on.append(c_on.scrape_ms())
    return off, on


def wait_attributed(url: str, n: int) -> str:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        body = requests.get(url + "/metrics", timeout=5).text
        if sum(1 for line in body.splitlines()
               if line.startswith("gpulse_gpu_busy_seconds_total{") and 'workload="' in line) == n:
            return body
        time.sleep(0.2)
    raise SystemExit(f"attribution did not reach all {n} entities within 30 s")


def in_process_costs(node: dict, devices: list, copy_labels: str, reps: int = 20) -> tuple[float, float]:
    cfg = test_config(kube__enabled=True, kube__pod_resources_socket=node["socket"], node_name=NODE,
                      kube__copy_labels=copy_labels)
    att = make_attributor(cfg, api_host=node["host"], api_port=node["port"], token_path=node["token_path"],
                          ca_path=node["ca_path"])
    t0 = time.perf_counter()
    for _ in range(reps):
        att.refresh_once()
    refresh_ms = (time.perf_counter() - t0) / reps * 1000
    assert all(att.lookup(d) for d in devices), "bench node not fully attributed"
    loops = max(1, 20000 // len(devices))
    t0 = time.perf_counter()
    for _ in range(loops):
        for d in devices:
            att.lookup(d)
    lookup_us = (time.perf_counter() - t0) / (loops * len(devices)) * 1e6
    att.stop()
    return lookup_us, refresh_ms


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scrapes", type=int, default=1000, help="scrapes of each server per round")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--entities", default="8,56")
    ap.add_argument("--refresh", default="1s", help="kube.refresh-interval of the attributed server")
    ap.add_argument("--copy-labels", default="", help="kube.copy-labels, e.g. team,app.kubernetes.io/name")
    ap.add_argument("--gzip", action="store_true", help="scrape with Accept-Encoding: gzip, as Prometheus does")
    a = ap.parse_args()
    headers = {"Accept-Encoding": "gzip"} if a.gzip else {}
    print(f"{'entities':>8} {'series':>7} {'labels':>6} {'off KB':>6} {'on KB':>6} {'off p50':>8} {'off p99':>8} {'on p50':>7} "
          f"{'on p99':>7} {'p99 on/off':>10} {'rounds':>17} {'lookup us':>9} {'refresh ms':>10} {'load':>5}")
    with tempfile.TemporaryDirectory() as workdir:
        for n in [int(x) for x in a.entities.split(",")]:
            parent_end, child_end = mp.Pipe()
            child = mp.Process(target=serve_node, args=(n, workdir, child_end), daemon=True)
            child.start()
            node = parent_end.recv()
            devices = SimSource(test_config(sim__gpus=n)).open()
            common = ("--source", "sim", "--sim.gpus", str(n), "--sim.scenario", "sync-stall", "--node-name", NODE)
            env = {"KUBERNETES_SERVICE_HOST": node["host"], "KUBERNETES_SERVICE_PORT": node["port"],
                   "KUBERNETES_SERVICEACCOUNT_DIR": node["sa_dir"]}
            off_p, off_url = start_gpulse(*common)
            on_p, on_url = start_gpulse(*common, "--kube.enabled", "--kube.pod-resources-socket",
                                        node["socket"], "--kube.refresh-interval", a.refresh,
                                        "--kube.copy-labels", a.copy_labels, env=env)
            try:
                body = wait_attributed(on_url, n)
                series = sum(1 for line in body.splitlines() if line and not line.startswith("#"))
                widest = max(line.split("}")[0].count('="') for line in body.splitlines()
                             if line.startswith("gpulse_") and "{" in line) + 1   # + __name__
                off_bytes = len(requests.get(off_url + "/metrics", timeout=5).content)
                paired(off_url + "/metrics", on_url + "/metrics", 50, headers)   # warm-up
                off, on, rounds = [], [], []
                for _ in range(a.rounds):
                    o, i = paired(off_url + "/metrics", on_url + "/metrics", a.scrapes, headers)
                    off += o
                    on += i
                    rounds.append(percentile(i, 99) / percentile(o, 99))
            finally:
                for p in (off_p, on_p):
                    p.terminate()
                    p.wait()
            lookup_us, refresh_ms = in_process_costs(node, devices, a.copy_labels)
            parent_end.send("stop")
            child.join(timeout=10)
            ratio = percentile(on, 99) / percentile(off, 99)
            spread = f"{min(rounds):.2f}/{statistics.median(rounds):.2f}/{max(rounds):.2f}"
            print(f"{n:>8} {series:>7} {widest:>6} {off_bytes / 1024:>6.0f} {len(body) / 1024:>6.0f} "
                  f"{percentile(off, 50):>8.2f} {percentile(off, 99):>8.2f} {percentile(on, 50):>7.2f} "
                  f"{percentile(on, 99):>7.2f} {ratio:>10.3f} {spread:>17} {lookup_us:>9.2f} {refresh_ms:>10.2f} "
                  f"{os.getloadavg()[0]:>5.1f}")
    print("times in ms; p99 on/off pools all rounds; rounds = min/median/max of the per-round ratio; "
          "labels = most labels on one series incl. __name__; load = 1-min load average at the end")


if __name__ == "__main__":
    main()
