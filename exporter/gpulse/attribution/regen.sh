#!/bin/sh
# Regenerates podresources_pb2.py, podresources_pb2.pyi and podresources_pb2_grpc.py
# from podresources.proto. Needs grpcio-tools (pip install grpcio-tools).
#
# The proto is compiled with exporter/ as the include root so the generated gRPC
# module imports its messages as `gpulse.attribution.podresources_pb2` (a package import)
# rather than a top-level `podresources_pb2` that only works from this folder.
#
# The generated files check at import time that the installed protobuf and grpcio
# are at least the versions that generated them; keep the [kube] extra's minimum
# versions in pyproject.toml in step when regenerating with a newer grpcio-tools.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
python=${PYTHON:-python3}
cd "$root"
"$python" -m grpc_tools.protoc -I . \
    --python_out=. --pyi_out=. --grpc_python_out=. \
    gpulse/attribution/podresources.proto
echo "regenerated $(ls "$here"/podresources_pb2*)"
