# gpudra: one image for the controller and the node agent.
# Build: docker build -t gpudra:dev .    Both processes start by module: python -m gpudra controller|agent
# Without Docker or a registry (these machines, CI): hack/node/images.sh builds it with buildah on a Debian base of
# its own, passed as PYTHON_IMAGE (docs/real-node.md).

ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
# The dependencies first, in a layer of their own: a change to the source alone reuses it.
COPY pyproject.toml ./
RUN python -m venv /opt/gpudra \
    && python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" \
       > requirements.txt \
    && /opt/gpudra/bin/pip install --no-compile -r requirements.txt
COPY README.md ./
COPY operator ./operator
# gpudra/deploy links to these (the manifests a pip-installed gpudra up applies)
COPY manifests/base ./manifests/base
COPY crds ./crds
RUN /opt/gpudra/bin/pip install --no-compile --no-deps . \
    && /opt/gpudra/bin/python -m compileall -q /opt/gpudra/lib

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="gpudra" \
      org.opencontainers.image.description="Kubernetes DRA driver and operator for NVIDIA GPUs"
COPY --from=build /opt/gpudra /opt/gpudra
ENV PATH=/opt/gpudra/bin:$PATH PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
# The controller runs as this user. The agent's DaemonSet overrides it with root: it serves sockets in the
# kubelet's plugin directories, writes CDI specs in /var/run/cdi and changes MIG through NVML (docs/install.md).
RUN useradd --system --uid 65532 --no-create-home --shell /usr/sbin/nologin gpudra
USER 65532:65532
ENTRYPOINT ["python", "-m", "gpudra"]
CMD ["controller"]
