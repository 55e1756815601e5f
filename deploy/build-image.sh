#!/usr/bin/env bash
# Build the kpdiag OCI image without a container engine:
#   1. a Debian bookworm minbase root filesystem (debootstrap, Debian's packages only) with python3 and the node
#      tools of deploy/image-packages.txt;
#   2. a virtualenv /opt/kpdiag made by the rootfs's own python3, with kpdiag's wheel (built from this tree) and its
#      dependencies (wheels fetched by the host's pip for the rootfs's Python within deploy/constraints.txt,
#      installed inside without an index);
#   3. docs, man pages, locales, apt lists and __pycache__ stripped;
#   4. one layer assembled with umoci (entrypoint kpdiag, user root, labels), exported with skopeo to
#        dist/kpdiag-image.tar       docker-archive: docker load / podman load / kind load image-archive
#        dist/kpdiag-image.oci.tar   oci-archive (keeps the manifest digest): ctr -n k8s.io images import
#        dist/kpdiag-oci/            the OCI layout itself (umoci unpack --image dist/kpdiag-oci:VERSION bundle)
#        dist/kpdiag-image.digest    sha256:<manifest digest>;  dist/kpdiag-image.ref  kpdiag:VERSION@sha256:…
#        dist/kpdiag-image.id        sha256:<config digest> — the image ID docker/podman/containerd show after a load
#
# Cache (KPDIAG_IMAGE_CACHE, default ~/.cache/kpdiag-image; --no-cache to ignore it):
#   base-KEY.tar (+ .sha256)  the debootstrapped rootfs; KEY = sha256 of suite, mirror, architecture, package list
#                             and the base recipe below; used only when the tarball's sha256 matches its record.
#   image-KEY/                the finished OCI layout; KEY = sha256 of this script, deploy/constraints.txt, the base
#                             tarball's sha256 and
#                             the wheel's content (its RECORD: the sha256 of every file in it); used only when every
#                             blob's sha256 matches its name and the manifest digest matches the one recorded.
#
#   bash deploy/build-image.sh [--no-cache]      (root; needs debootstrap umoci skopeo, network to the Debian
#                                                  mirror and the package index)
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
USE_CACHE=1
[ "${1:-}" = "--no-cache" ] && USE_CACHE=0
[ "$(id -u)" = 0 ] || { echo "build-image.sh: needs root (debootstrap, chroot)" >&2; exit 2; }
for t in debootstrap umoci skopeo; do
  command -v "$t" >/dev/null || { echo "build-image.sh: $t not found (apt-get install debootstrap umoci skopeo)" >&2; exit 2; }
done

VERSION=$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' kpdiag/__init__.py)
NAME=${KPDIAG_IMAGE_NAME:-kpdiag}
SUITE=bookworm
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
case "$(uname -m)" in x86_64) ARCH=amd64 ;; aarch64) ARCH=arm64 ;; *) ARCH=$(uname -m) ;; esac
CACHE=${KPDIAG_IMAGE_CACHE:-$HOME/.cache/kpdiag-image}
DIST=${KPDIAG_IMAGE_DIST:-$REPO/dist}   # where the archives go (tests use their own directory)
PKGS=$(grep -v '^\s*#' deploy/image-packages.txt | xargs)
START=$(date +%s)
say() { echo "[$(( $(date +%s) - START ))s] $*"; }

WORK=$(mktemp -d /tmp/kpdiag-image.XXXXXX)
ROOT=$WORK/rootfs
cleanup() {
  for m in proc sys dev/pts dev; do umount "$ROOT/$m" 2>/dev/null || true; done
  if findmnt -rn -o TARGET | grep -q "^$WORK"; then echo "build-image.sh: $WORK still has mounts, left in place" >&2
  else rm -rf "$WORK"; fi
}
trap cleanup EXIT
mkdir -p "$CACHE" "$DIST"
exec 9>"$CACHE/lock"
flock 9   # one build at a time on this machine: they share the cache and dist/
inroot() { chroot "$ROOT" env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LC_ALL=C.UTF-8 "$@"; }

# ---- 1. base root filesystem -------------------------------------------------------------------------------
BASE_RECIPE="debootstrap --variant=minbase --include=${PKGS// /,} $SUITE $MIRROR arch=$ARCH; apt clean; v1"
BASE_KEY=$(printf '%s' "$BASE_RECIPE" | sha256sum | cut -c1-20)
BASE_TAR=$CACHE/base-$BASE_KEY.tar
if [ "$USE_CACHE" = 1 ] && [ -f "$BASE_TAR" ] && [ -f "$BASE_TAR.sha256" ] \
   && [ "$(sha256sum < "$BASE_TAR" | cut -d' ' -f1)" = "$(cat "$BASE_TAR.sha256")" ]; then
  say "base rootfs: cached $BASE_TAR (sha256 verified)"
else
  say "base rootfs: debootstrap $SUITE minbase + $PKGS"
  debootstrap --variant=minbase --arch="$ARCH" --include="${PKGS// /,}" "$SUITE" "$WORK/base" "$MIRROR" > "$WORK/debootstrap.log" 2>&1 \
    || { tail -n 30 "$WORK/debootstrap.log" >&2; exit 1; }
  chroot "$WORK/base" apt-get clean
  tar -C "$WORK/base" --numeric-owner --xattrs -cf "$BASE_TAR.tmp" .
  sha256sum < "$BASE_TAR.tmp" | cut -d' ' -f1 > "$BASE_TAR.sha256"
  mv "$BASE_TAR.tmp" "$BASE_TAR"
  rm -rf "$WORK/base"
fi
BASE_SHA=$(cat "$BASE_TAR.sha256")

# ---- 2. kpdiag's wheel -----------------------------------------------------------------------------------------
say "wheel: pip wheel --no-deps ."
# from a copy of what the wheel is made of: no build/ directory shared with another build running at the same time
mkdir -p "$WORK/src" && cp -a pyproject.toml README.md LICENSE kpdiag checks "$WORK/src/"
find "$WORK/src" -name __pycache__ -type d -prune -exec rm -rf {} +
python3 -m pip wheel -q --no-deps -w "$WORK/wheel" "$WORK/src" >/dev/null
WHEEL=$(ls "$WORK"/wheel/kpdiag-*.whl)
# the wheel's content, not its bytes (zip timestamps differ per build): RECORD lists every file's sha256
WHEEL_SHA=$(python3 - "$WHEEL" <<'EOF'
import hashlib, sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
record = next(n for n in z.namelist() if n.endswith(".dist-info/RECORD"))
lines = sorted(l for l in z.read(record).decode().splitlines() if l and not l.startswith(record + ","))
print(hashlib.sha256("\n".join(lines).encode()).hexdigest())
EOF
)
IMAGE_KEY=$( { cat "$0" deploy/constraints.txt | sha256sum | cut -d' ' -f1; echo "$BASE_SHA" "$WHEEL_SHA" "$NAME" "$VERSION"; } | sha256sum | cut -c1-20)
CACHED=$CACHE/image-$IMAGE_KEY

verify_layout() {  # every blob's sha256 is its name, and the manifest digest is the recorded one
  local dir=$1 f
  [ -f "$dir.digest" ] && [ -f "$dir/index.json" ] || return 1
  for f in "$dir"/blobs/sha256/*; do
    [ "$(sha256sum < "$f" | cut -d' ' -f1)" = "$(basename "$f")" ] || { echo "cache: blob $f is corrupt" >&2; return 1; }
  done
  [ "$(skopeo inspect --raw "oci:$dir:$VERSION" | sha256sum | cut -d' ' -f1)" = "$(cut -d: -f2 < "$dir.digest")" ]
}

if [ "$USE_CACHE" = 1 ] && verify_layout "$CACHED"; then
  say "image: cached $CACHED (every blob's sha256 and the manifest digest verified)"
  OCI=$CACHED
else
  rm -rf "$CACHED" "$CACHED.digest"
  # ---- 3. rootfs: base + kpdiag in a venv ----------------------------------------------------------------------
  mkdir -p "$ROOT"
  tar -C "$ROOT" --numeric-owner --xattrs -xf "$BASE_TAR"
  PYV=$(inroot python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  PYT=${PYV/./}
  say "dependencies: wheels for the rootfs's Python $PYV ($ARCH), fetched by the host's pip"
  mkdir -p "$ROOT/tmp/wheels"
  cp "$WHEEL" "$ROOT/tmp/wheels/"
  M=$(uname -m)
  python3 -m pip download -q -d "$ROOT/tmp/wheels" --only-binary=:all: --python-version "$PYV" --implementation cp \
    --abi "cp$PYT" --abi abi3 --abi none --platform "manylinux2014_$M" --platform "manylinux_2_28_$M" --platform "manylinux_2_17_$M" \
    --platform "linux_$M" -c deploy/constraints.txt "$WHEEL" pip 2>&1 >/dev/null | { grep -v "^WARNING: Location" >&2 || true; }
  say "venv /opt/kpdiag (the rootfs's python3), pip install kpdiag from the wheels, no index"
  inroot python3 -m venv --without-pip /opt/kpdiag
  PIPWHL=$(cd "$ROOT/tmp/wheels" && ls pip-*.whl)
  inroot /opt/kpdiag/bin/python "/tmp/wheels/$PIPWHL/pip" install -q --no-index --find-links /tmp/wheels \
    --no-compile --no-cache-dir --disable-pip-version-check kpdiag
  inroot /opt/kpdiag/bin/python "/tmp/wheels/$PIPWHL/pip" list --format=freeze --disable-pip-version-check \
    --path "/opt/kpdiag/lib/python$PYV/site-packages" > "$WORK/python-packages.txt"
  ln -sf /opt/kpdiag/bin/kpdiag "$ROOT/usr/local/bin/kpdiag"
  ln -sf /opt/kpdiag/bin/kubectl-kpdiag "$ROOT/usr/local/bin/kubectl-kpdiag"
  inroot sh -c 'id -u kpdiag >/dev/null 2>&1 || useradd --uid 10001 --user-group --create-home --shell /usr/sbin/nologin kpdiag'
  inroot dpkg-query -W -f '${Package} ${Version}\n' > "$WORK/debian-packages.txt"
  inroot kpdiag --version >/dev/null

  # ---- 4. strip ----------------------------------------------------------------------------------------------------
  say "strip docs, man pages, locales, apt lists, caches, __pycache__"
  find "$ROOT/usr/share/doc" -type f ! -name copyright -delete   # keep the licences
  find "$ROOT/usr/share/doc" -depth -type d -empty -delete
  rm -rf "$ROOT"/usr/share/{man,info,locale,lintian,linda}/* "$ROOT"/var/lib/apt/lists/* "$ROOT"/var/cache/apt/* \
         "$ROOT"/var/cache/debconf/*-old "$ROOT"/var/log/* "$ROOT"/tmp/* "$ROOT"/dev/* "$ROOT"/proc/* "$ROOT"/sys/*
  find "$ROOT" -xdev -name __pycache__ -type d -prune -exec rm -rf {} +
  : > "$ROOT/etc/resolv.conf"; : > "$ROOT/etc/hostname"
  ROOTFS_BYTES=$(du -sb "$ROOT" | cut -f1)

  # ---- 5. assemble ------------------------------------------------------------------------------------------------
  say "umoci: one layer, config"
  OCI=$WORK/oci
  umoci init --layout "$OCI"
  umoci new --image "$OCI:$VERSION"
  umoci insert --image "$OCI:$VERSION" --history.created_by "deploy/build-image.sh: debootstrap $SUITE + kpdiag $VERSION" "$ROOT" /
  cfg=(--config.entrypoint kpdiag --config.cmd --help --config.user 0:0 --config.workingdir /
       --config.env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --config.env PYTHONDONTWRITEBYTECODE=1
       --os linux --architecture "$ARCH" --author kpdiag
       --config.label org.opencontainers.image.title=kpdiag
       --config.label org.opencontainers.image.version="$VERSION"
       --config.label org.opencontainers.image.licenses=Apache-2.0
       --config.label org.opencontainers.image.base.name="debian:$SUITE (debootstrap minbase)"
       --config.label io.kpdiag.wheel.sha256="$WHEEL_SHA"
       --config.label io.kpdiag.base.sha256="$BASE_SHA"
       --config.label io.kpdiag.python-packages="$(tr '\n' ' ' < "$WORK/python-packages.txt" | sed 's/ $//')")
  umoci config --image "$OCI:$VERSION" "${cfg[@]}"
  umoci gc --layout "$OCI"
  skopeo inspect --raw "oci:$OCI:$VERSION" | sha256sum | awk '{print "sha256:" $1}' > "$OCI.digest"
  cp "$WORK/python-packages.txt" "$WORK/debian-packages.txt" "$OCI/" 2>/dev/null || true
  echo "$ROOTFS_BYTES" > "$OCI/rootfs-bytes"
  if [ "$USE_CACHE" = 1 ]; then
    cp -a "$OCI" "$CACHED" && cp "$OCI.digest" "$CACHED.digest"
    find "$CACHE" -maxdepth 1 -name 'image-*' ! -name "image-$IMAGE_KEY*" -exec rm -rf {} +   # keep one image
  fi
fi

# ---- 6. export ------------------------------------------------------------------------------------------------------
say "skopeo: docker-archive and oci-archive"
DIGEST=$(cat "$OCI.digest")
rm -rf "$DIST/kpdiag-oci" "$DIST/kpdiag-image.tar" "$DIST/kpdiag-image.oci.tar"
cp -a "$OCI" "$DIST/kpdiag-oci"
skopeo copy -q "oci:$DIST/kpdiag-oci:$VERSION" "docker-archive:$DIST/kpdiag-image.tar:$NAME:$VERSION"
# the OCI archive's image name fully qualified, as docker and containerd name a docker-archive's (docker.io/library/…)
case "$NAME" in
  */*) first=${NAME%%/*}; case "$first" in *.*|*:*|localhost) FULL=$NAME ;; *) FULL=docker.io/$NAME ;; esac ;;
  *) FULL=docker.io/library/$NAME ;;
esac
skopeo copy -q "oci:$DIST/kpdiag-oci:$VERSION" "oci-archive:$DIST/kpdiag-image.oci.tar:$FULL:$VERSION"
[ "sha256:$(skopeo inspect --raw "oci-archive:$DIST/kpdiag-image.oci.tar" | sha256sum | cut -d' ' -f1)" = "$DIGEST" ] \
  || { echo "build-image.sh: the oci-archive's manifest digest differs from the layout's" >&2; exit 1; }
CONFIG_ID=$(skopeo inspect --raw "oci:$DIST/kpdiag-oci:$VERSION" | python3 -c 'import json,sys; print(json.load(sys.stdin)["config"]["digest"])')
echo "$DIGEST" > "$DIST/kpdiag-image.digest"
echo "$NAME:$VERSION@$DIGEST" > "$DIST/kpdiag-image.ref"
echo "$CONFIG_ID" > "$DIST/kpdiag-image.id"
LAYER_BYTES=$(skopeo inspect --raw "oci:$DIST/kpdiag-oci:$VERSION" | python3 -c 'import json,sys; print(sum(l["size"] for l in json.load(sys.stdin)["layers"]))')
mb() { awk -v b="$1" 'BEGIN { printf "%.1f MB", b / 1e6 }'; }
say "done"
echo "image:      $NAME:$VERSION@$DIGEST"
echo "image ID:   $CONFIG_ID"
echo "size:       $(mb "$(cat "$OCI/rootfs-bytes")") unpacked, $(mb "$LAYER_BYTES") compressed layer, docker-archive $(mb "$(stat -c %s "$DIST/kpdiag-image.tar")")"
echo "files:      dist/kpdiag-image.tar (docker-archive), dist/kpdiag-image.oci.tar, dist/kpdiag-oci/, dist/kpdiag-image.{digest,ref,id}"
