# gpulse exporter image: installed into a virtualenv in a build stage, shipped in
# a slim stage with no compiler, no pip cache and a non-root user.
#
#   make image                      # or: docker build -t gpulse:0.1.0 .
#   make image-push IMAGE=registry.example.com/gpulse:0.1.0   # after make image with that IMAGE
#   docker run --rm --gpus all -p 9479:9479 gpulse:0.1.0
#   docker run --rm -p 9479:9479 gpulse:0.1.0 --source=sim   # no GPU needed
#
# The NVIDIA container runtime injects libnvidia-ml.so.1 (driver capability
# "utility"), so the image carries no CUDA or driver files.
ARG PYTHON_VERSION=3.11

FROM python:${PYTHON_VERSION}-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/gpulse
WORKDIR /src
COPY pyproject.toml README.md ./
COPY exporter ./exporter
# The kube extra brings the gRPC client for the kubelet's pod-resources socket,
# auth the bcrypt check behind basic auth in the web config.
# Byte-compiled here because the root filesystem is read-only at run time.
RUN /opt/gpulse/bin/pip install ".[kube,auth]" \
 && /opt/gpulse/bin/python -m compileall -q /opt/gpulse

FROM python:${PYTHON_VERSION}-slim
LABEL org.opencontainers.image.title="gpulse" \
      org.opencontainers.image.description="GPU sync-stall and straggler exporter for multi-GPU training" \
      org.opencontainers.image.licenses="Apache-2.0"
# A fixed numeric uid: Kubernetes can only verify runAsNonRoot against a number.
RUN useradd --system --uid 10001 --user-group --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin gpulse
COPY --from=build /opt/gpulse /opt/gpulse
ENV PATH=/opt/gpulse/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=utility
USER 10001:10001
EXPOSE 9479
ENTRYPOINT ["gpulse", "serve"]
