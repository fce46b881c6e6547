# syntax=docker/dockerfile:1
# One image for the operator (the default command) and the agent (`kondor-agent`, set by the
# Helm chart's DaemonSet). Build:  docker build -t kondor:0.1.0 .
# Without Docker, `make image` builds this same file with buildah on a Debian bookworm base
# (tools/build_image.py) and writes it as an OCI archive.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# ---- builder: a virtual environment with the dependencies, then Kondor itself ----------------
FROM ${PYTHON_IMAGE} AS builder
# Set (tools/build_image.py sets 0), pip compiles hash-checked .pyc, not timestamped ones.
ARG SOURCE_DATE_EPOCH
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
RUN python -m venv /opt/kondor
ENV PATH=/opt/kondor/bin:$PATH
WORKDIR /src

# The dependencies come from pyproject.toml alone, so this layer is rebuilt only when they
# change, not on every source edit. Only [project] dependencies, the runtime set: the
# extras (test and lint tools, the benchmarks' plotting) stay out of the image.
COPY pyproject.toml ./
RUN python -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]))' \
        > requirements.txt \
    && pip install -r requirements.txt

# Then the sources (README.md is the package's long description). The dev cluster
# (devcluster/) does not run in a pod and is left out: `kondor` offers no `dev-cluster` here.
COPY README.md ./
COPY core ./core
COPY kube ./kube
COPY operator ./operator
COPY agent ./agent
COPY cli ./cli
COPY tools/check_imports.py ./
# Then pip and setuptools leave the environment (nothing installs at run time). Every module
# of the five runtime packages must import, no distribution only an extra needs may be
# installed, and the entry points must start (htcondor's wheel needs libstdc++ and zlib from
# the base image, which the runtime shares): a module that does not import fails the build,
# named, not the pod at its first use.
RUN pip install --no-deps . \
    && python -m pip uninstall --yes --quiet pip setuptools \
    && python -I check_imports.py kondor_core kondor_kube kondor_operator kondor_agent kondor_cli \
        --pyproject pyproject.toml \
    && kondor-operator --help > /dev/null \
    && kondor-agent --help > /dev/null \
    && kondor --help > /dev/null

# ---- runtime: the environment only, run by a non-root user -----------------------------------
FROM ${PYTHON_IMAGE} AS runtime
LABEL org.opencontainers.image.title="kondor" \
      org.opencontainers.image.description="HTCondor-style execution points on Kubernetes: operator and node agent" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PATH=/opt/kondor/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# A numeric user, so that the kubelet can check `runAsNonRoot` against the image.
RUN groupadd --system --gid 65532 kondor \
    && useradd --system --uid 65532 --gid 65532 --no-create-home \
        --home-dir /nonexistent --shell /usr/sbin/nologin kondor
COPY --from=builder /opt/kondor /opt/kondor
USER 65532:65532
# The agent needs no more: it reads the host's world-readable files through read-only mounts
# under /host; the chart hands it the two host directories it writes (state, execute).
CMD ["kondor-operator"]
