"""A local stand-in for a Kubernetes node, for tests, benchmarks and demos.

Both halves are real servers speaking the real protocols, so the client code
under test is exactly what runs in a cluster:

- FakeKubelet: a gRPC server implementing PodResourcesLister (v1) on a unix socket;
- FakeApiServer: an HTTPS server answering GET /api/v1/pods with a PodList, behind a
  bearer token and a certificate signed by a CA generated on the spot; it writes
  the token and CA where a service-account mount would have them.

They share one FakeCluster (the pods), so a test changes the cluster once and
both servers agree. Needs grpcio and, for the API server, cryptography.
"""
from __future__ import annotations

import datetime
import ipaddress
import json
import os
import secrets
import ssl
import threading
from concurrent import futures
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse


@dataclass
class FakePod:
    name: str
    namespace: str = "default"
    node: str = "node-a"
    # container -> resource name -> device ids
    devices: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    # container -> [(DRA driver, device name)]
    dra: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    owners: list[dict] = field(default_factory=list)
    phase: str = "Running"

    def as_api_object(self) -> dict:
        return {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": self.name, "namespace": self.namespace, "labels": self.labels,
                         "ownerReferences": self.owners},
            "spec": {"nodeName": self.node},
            "status": {"phase": self.phase},
        }


class FakeCluster:
    def __init__(self, pods: list[FakePod] | None = None):
        self._lock = threading.Lock()
        self._pods: list[FakePod] = list(pods or [])

    def set_pods(self, pods: list[FakePod]) -> None:
        with self._lock:
            self._pods = list(pods)

    def pods(self, node: str | None = None) -> list[FakePod]:
        with self._lock:
            return [p for p in self._pods if node is None or p.node == node]


# ---------------------------------------------------------------- kubelet


class FakeKubelet:
    """PodResourcesLister on `socket_path`, listing the pods of `node`."""

    def __init__(self, cluster: FakeCluster, socket_path: str, node: str = "node-a"):
        import grpc

        from gpulse.attribution import podresources_pb2 as pb
        from gpulse.attribution import podresources_pb2_grpc as pbg

        self.cluster, self.socket_path, self.node = cluster, socket_path, node
        self.list_calls = 0
        fake = self

        class Servicer(pbg.PodResourcesListerServicer):
            def List(self, request, context):
                fake.list_calls += 1
                return pb.ListPodResourcesResponse(pod_resources=[fake._pod_message(p)
                                                                  for p in cluster.pods(fake.node)])

        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        pbg.add_PodResourcesListerServicer_to_server(Servicer(), self.server)
        self.server.add_insecure_port("unix:" + os.path.abspath(socket_path))
        self.server.start()

    @staticmethod
    def _pod_message(p: FakePod):
        from gpulse.attribution import podresources_pb2 as pb

        containers = []
        for name in sorted(set(p.devices) | set(p.dra)):
            devs = [pb.ContainerDevices(resource_name=res, device_ids=ids)
                    for res, ids in p.devices.get(name, {}).items()]
            dyn = [pb.DynamicResource(claim_name=f"{p.name}-{name}-gpu", claim_namespace=p.namespace,
                                      claim_resources=[pb.ClaimResource(driver_name=drv, pool_name=p.node,
                                                                        device_name=dev)
                                                       for drv, dev in p.dra[name]])] if name in p.dra else []
            containers.append(pb.ContainerResources(name=name, devices=devs, cpu_ids=[0, 1],
                                                    dynamic_resources=dyn))
        return pb.PodResources(name=p.name, namespace=p.namespace, containers=containers)

    def stop(self) -> None:
        self.server.stop(grace=None).wait()


# ---------------------------------------------------------------- API server


def make_tls_files(directory: str, host: str = "127.0.0.1") -> tuple[str, str, str]:
    """A CA and a server certificate for `host` signed by it. Returns (ca.crt,
    server.crt, server.key) paths inside `directory`."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gpulse-test-ca")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - datetime.timedelta(minutes=5))
          .not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False,
                                       key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, key_cert_sign=True, crl_sign=True,
                                       encipher_only=False, decipher_only=False), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    try:
        san = x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        san = x509.DNSName(host)
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kubernetes")]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([san, x509.DNSName("localhost")]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    paths = tuple(os.path.join(directory, n) for n in ("ca.crt", "server.crt", "server.key"))
    with open(paths[0], "wb") as fh:
        fh.write(ca.public_bytes(serialization.Encoding.PEM))
    with open(paths[1], "wb") as fh:
        fh.write(cert.public_bytes(serialization.Encoding.PEM))
    with open(paths[2], "wb") as fh:
        fh.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                   serialization.NoEncryption()))
    return paths  # type: ignore[return-value]


class FakeApiServer:
    """GET /api/v1/pods?fieldSelector=spec.nodeName=<node> over HTTPS.

    `sa_dir` ends up holding `token` and `ca.crt`, laid out like the in-cluster
    service-account mount. Knobs for failure tests:
      status   answer every request with this HTTP status (e.g. 403) instead of pods;
      gate     a threading.Event: requests wait for it (a slow API server);
      arrived  set when a request has arrived (to sequence slow-API tests).
    """

    def __init__(self, cluster: FakeCluster, sa_dir: str, host: str = "127.0.0.1"):
        self.cluster = cluster
        self.sa_dir = sa_dir
        self.status = 200
        self.gate: threading.Event | None = None
        self.arrived = threading.Event()
        self.queries: list[dict[str, list[str]]] = []
        ca, crt, key = make_tls_files(sa_dir, host)
        self.ca_path = ca
        self.token_path = os.path.join(sa_dir, "token")
        self.rotate_token()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            # Keep-alive like a real API server, so a client's TLS handshake happens
            # once and not on every list; without Nagle, or the client's delayed ACK
            # holds each body back ~40 ms.
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def log_message(self, *args):  # keep test output clean
                pass

            def do_GET(self):
                fake._handle(self)

        self.httpd = ThreadingHTTPServer((host, 0), Handler)
        self.httpd.daemon_threads = True
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(crt, key)
        self.httpd.socket = ctx.wrap_socket(self.httpd.socket, server_side=True)
        self.host, self.port = host, str(self.httpd.server_address[1])
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)
        self._thread.start()

    def rotate_token(self) -> None:
        """New token, written where the client reads it (as the kubelet rotates it)."""
        self.token = secrets.token_urlsafe(24)
        with open(self.token_path, "w", encoding="utf-8") as fh:
            fh.write(self.token + "\n")

    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        self.arrived.set()
        gate = self.gate
        if gate is not None:
            gate.wait(timeout=60)
        url = urlparse(h.path)
        if h.headers.get("Authorization") != f"Bearer {self.token}":
            return self._send(h, 401, _status(401, "Unauthorized", "Unauthorized"))
        if self.status != 200:
            return self._send(h, self.status, _status(
                self.status, "Forbidden" if self.status == 403 else "InternalError",
                'pods is forbidden: User "system:serviceaccount:gpulse:gpulse" cannot list '
                'resource "pods" in API group "" at the cluster scope'))
        if url.path != "/api/v1/pods":
            return self._send(h, 404, _status(404, "NotFound", "the server could not find the requested resource"))
        query = parse_qs(url.query)
        self.queries.append(query)
        node = None
        for sel in query.get("fieldSelector", []):
            if sel.startswith("spec.nodeName="):
                node = sel.split("=", 1)[1]
        items = [p.as_api_object() for p in self.cluster.pods(node)]
        self._send(h, 200, {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "1"},
                            "items": items})

    @staticmethod
    def _send(h: BaseHTTPRequestHandler, code: int, doc: dict) -> None:
        body = json.dumps(doc).encode()
        h.send_response(code)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)

    def stop(self) -> None:
        if self.gate is not None:
            self.gate.set()
        self.httpd.shutdown()
        self.httpd.server_close()


def _status(code: int, reason: str, message: str) -> dict:
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message,
            "reason": reason, "code": code}
