#!/usr/bin/env bash
# Print deploy manifests with the image digest of your build filled in (the checked-in files carry the placeholder
# IMAGE_DIGEST: no manifest in the repository names a mutable tag).
#   bash deploy/render.sh [FILE.yaml …]            digest from dist/kpdiag-image.digest (deploy/build-image.sh)
#   KPDIAG_IMAGE_DIGEST=sha256:… bash deploy/render.sh deploy/svc-pod.yaml
set -euo pipefail
cd "$(dirname "$0")/.."
digest=${KPDIAG_IMAGE_DIGEST:-$(cat dist/kpdiag-image.digest 2>/dev/null || true)}
if ! [[ $digest =~ ^sha256:[0-9a-f]{64}$ ]]; then
  echo "render.sh: no image digest: run deploy/build-image.sh (writes dist/kpdiag-image.digest) or set KPDIAG_IMAGE_DIGEST=sha256:…" >&2
  exit 2
fi
files=("$@")
[ ${#files[@]} -gt 0 ] || files=(deploy/svc-pod.yaml)
first=1
for f in "${files[@]}"; do
  [ $first = 1 ] || echo "---"
  first=0
  sed "s/@sha256:IMAGE_DIGEST/@$digest/g" "$f"
done
