# The trainer's container for Vertex AI, now that Google's prebuilt TensorFlow 2.15 training images
# (tf-cpu.2-15.py310, tf-gpu.2-15.py310) are gone (end of availability 2025-11-14). Python 3.11, the newest
# TensorFlow 2.15 has wheels for (3.10 reached its end of life in October 2026); requirements.txt's pins
# resolve for it (tests/test_requirements.py). docs/cloud.md: build, push, submit. Vertex AI runs
# linux/amd64 only: build with --platform on an ARM laptop.
#
#   docker build --platform linux/amd64 -t REGION-docker.pkg.dev/PROJECT/REPO/cifar10-estimator:cpu .
#   docker build --platform linux/amd64 --build-arg TENSORFLOW="tensorflow[and-cuda]==2.15.1" \
#       -t REGION-docker.pkg.dev/PROJECT/REPO/cifar10-estimator:gpu .
#
# The GPU variant takes CUDA 12.2 and cuDNN 8.9 from pip (TensorFlow's [and-cuda] extra: its libraries find
# them beside themselves in site-packages/nvidia). The NVIDIA driver is the machine's: Google's GPU device
# plugin mounts it under /usr/local/nvidia, Docker's NVIDIA runtime (docker run --gpus) under /usr/lib; the
# variables below point the loader there, as NVIDIA's own CUDA images do. On a CPU machine they are inert.
ARG PYTHON_VERSION=3.11
FROM python:${PYTHON_VERSION}-slim

ARG TENSORFLOW="tensorflow-cpu==2.15.1"
ENV LD_LIBRARY_PATH=/usr/local/nvidia/lib64:/usr/local/nvidia/lib \
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility

WORKDIR /opt/cifar10
COPY requirements.txt .
# requirements.txt pins tensorflow-cpu; the GPU variant puts its TensorFlow in that line's place.
RUN sed "s/^tensorflow-cpu==.*/${TENSORFLOW}/" requirements.txt > /tmp/requirements.txt \
    && pip install --no-cache-dir -r /tmp/requirements.txt \
    && rm /tmp/requirements.txt

COPY setup.py MANIFEST.in generate_cifar10_tfrecords.py ./
COPY estimator ./estimator
RUN pip install --no-cache-dir --no-deps . && rm -rf /opt/cifar10/estimator

# Vertex AI's job configs (python -m estimator.vertex --image-uri ...) give the same command.
ENTRYPOINT ["python", "-m", "estimator.cifar10_main"]
