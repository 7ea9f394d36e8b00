# The trainer's container for Vertex AI, now that Google's prebuilt TensorFlow 2.15 training images
# (tf-cpu.2-15.py310, tf-gpu.2-15.py310) are gone (end of availability 2025-11-14). Python 3.10, as
# they ran (requirements.txt's pins resolve for 3.9-3.11: tests/test_requirements.py resolves them for
# this image's Python and platform). docs/cloud.md: build, push, submit.
#
#   docker build -t REGION-docker.pkg.dev/PROJECT/REPO/cifar10-estimator:cpu .
#   docker build --build-arg TENSORFLOW="tensorflow[and-cuda]==2.15.1" \
#       -t REGION-docker.pkg.dev/PROJECT/REPO/cifar10-estimator:gpu .
#
# The GPU variant takes CUDA and cuDNN from pip (TensorFlow's [and-cuda] extra); the host's NVIDIA
# driver comes in at run time, as on Vertex AI's GPU machines.
ARG PYTHON_VERSION=3.10
FROM python:${PYTHON_VERSION}-slim

ARG TENSORFLOW="tensorflow-cpu==2.15.1"

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
