"""kpdiag: why does traffic to a Kubernetes Service not arrive?"""

__version__ = "0.1.0"

# The image `kpdiag cluster` runs on each node (kpdiag/fleet/pods.py), which the probes and checks name in their
# advice: what deploy/build-image.sh builds and `kind load` / `ctr images import` put on the nodes. The default is
# never pulled (imagePullPolicy Never): no registry namespace, whoever owns it, can put its own privileged pod on
# every node. An --image pinned by digest (NAME@sha256:…, dist/kpdiag-image.ref) may be pulled.
IMAGE_REPO = "kpdiag"
DEFAULT_IMAGE = f"{IMAGE_REPO}:{__version__}"
