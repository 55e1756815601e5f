# kpdiag image: `kpdiag cluster` runs it on every node; `kubectl debug` / a debug pod runs `kpdiag svc`.
#   docker build -t ghcr.io/kpdiag/kpdiag:$(python3 -c 'import kpdiag; print(kpdiag.__version__)') .
#
# Tools: iptables 1.8 with BOTH backends (iptables-legacy* and iptables-nft*, the node decides which one its
# rules are in), nftables, ipset, ipvsadm, conntrack, iproute2. On a node, kpdiag prefers the host's own tools
# (chroot into the read-only host root at /host) so their versions match the host's; these are the fallback.
#
# User: the image runs as root by default, because its two main uses need capabilities that only uid 0 gets
# in a container (kubectl debug cannot set a user, and file capabilities on the interpreter would make the image
# fail to start where NET_RAW is dropped):
#   kpdiag node / cluster pods   privileged (CAP_NET_ADMIN for rule and netlink dumps, CAP_SYS_CHROOT for /host,
#                                the host's /proc/sys); the pod kpdiag cluster creates also sets runAsUser: 0
#   kpdiag svc with probes       CAP_NET_RAW (scapy's ICMP/TCP probes), e.g.
#                                kubectl debug -it POD --image=… --profile=netadmin -- kpdiag svc NAME -n NS
# Everything else runs as the unprivileged user "kpdiag" (uid 10001) that the image also has:
#   docker run --user 10001 … kpdiag analyze BUNDLE | kpdiag svc NAME -n NS --no-probe | kpdiag trace …
#   (in a pod: securityContext: {runAsUser: 10001, runAsNonRoot: true, capabilities: {drop: [ALL]}})
FROM python:3.11-slim-bookworm

ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends iptables nftables ipset ipvsadm conntrack iproute2 kmod procps ca-certificates \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /src
COPY pyproject.toml README.md ./
COPY kpdiag ./kpdiag
COPY checks ./checks
RUN pip install --no-cache-dir . && rm -rf /src

RUN useradd --uid 10001 --create-home --shell /usr/sbin/nologin kpdiag
WORKDIR /home/kpdiag
ENTRYPOINT ["kpdiag"]
CMD ["--help"]
