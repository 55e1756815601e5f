# kpdiag image for those who build with a container engine: `kpdiag cluster` runs it on every node; `kubectl debug` /
# a debug pod runs `kpdiag svc`. The image this repository builds and tests is made without one by
# deploy/build-image.sh (Debian bookworm, debootstrap, umoci, skopeo) from the same package list
# (deploy/image-packages.txt; tests/packaging/test_deploy.py keeps the two in step) and deploy/constraints.txt.
#   docker build -t kpdiag:$(python3 -c 'import kpdiag; print(kpdiag.__version__)') .
#
# Tools: iptables 1.8 with BOTH backends (iptables-legacy* and iptables-nft*, the node decides which one its
# rules are in), nftables, ipset, ipvsadm, conntrack, iproute2. On a node, kpdiag prefers the host's own tools
# (chroot into the read-only host root at /host) so their versions match the host's; these are the fallback.
#
# User: the image runs as root by default, because its two main uses need capabilities that only uid 0 gets
# in a container (kubectl debug cannot set a user, and file capabilities on the interpreter would make the image
# fail to start where NET_RAW is dropped):
#   kpdiag node / cluster pods   NET_ADMIN, NET_RAW, SYS_PTRACE (docs/privileges.md says why each); the pod
#                                kpdiag cluster creates sets runAsUser: 0 and drops the rest
#   kpdiag svc with probes       CAP_NET_RAW (scapy's ICMP/TCP probes), e.g.
#                                kubectl debug -it POD --image=… --profile=netadmin -- kpdiag svc NAME -n NS
# Everything else runs as the unprivileged user "kpdiag" (uid 10001) that the image also has:
#   docker run --user 10001 … kpdiag analyze BUNDLE | kpdiag svc NAME -n NS --no-probe | kpdiag trace …
#   (in a pod: securityContext: {runAsUser: 10001, runAsNonRoot: true, capabilities: {drop: [ALL]}})
# The base image by digest (python:3.11-slim-bookworm, Debian bookworm as deploy/build-image.sh's debootstrap): a tag
# can be moved to other content, a digest cannot. To update: `docker buildx imagetools inspect python:3.11-slim-bookworm`
# and replace the digest (tests/packaging/test_deploy.py refuses a FROM without one).
FROM python:3.11-slim-bookworm@sha256:a36c24f9cbdf4fd0f52d67f0823eeac19c2028c637cecc392d97f980d4fec56b

ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends iptables nftables ipset ipvsadm conntrack iproute2 kmod procps ca-certificates ethtool \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /src
COPY pyproject.toml README.md LICENSE ./
COPY deploy/constraints.txt ./deploy/
COPY kpdiag ./kpdiag
COPY checks ./checks
RUN pip install --no-cache-dir -c deploy/constraints.txt . && rm -rf /src

RUN useradd --uid 10001 --create-home --shell /usr/sbin/nologin kpdiag
WORKDIR /home/kpdiag
ENTRYPOINT ["kpdiag"]
CMD ["--help"]
