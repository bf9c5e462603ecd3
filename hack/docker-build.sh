#!/usr/bin/env bash
# docker-build.sh IMAGE: builds the felix image on a machine that cannot
# pull a Go builder image. The binary is built on the host by
# hack/build-felix.sh (as the Dockerfile's build stage does) and the image
# from the Dockerfile's last stage alone, its `COPY --from=build` source
# replaced by that binary: same binary, same layout. BASE=scratch builds
# without pulling anything.
#
# docker-build.sh --print-dockerfile prints the Dockerfile it would use.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"

# final_stage prints the Dockerfile's global ARG BASE and its last stage,
# with the build stage's output replaced by the context's felix.
final_stage() {
  awk '
    /^ARG BASE=/ && !seen_from { print; next }
    /^FROM / { seen_from = 1; stage = "" }
    seen_from { stage = stage $0 "\n" }
    END { printf "%s", stage }
  ' "${ROOT}/Dockerfile" | sed 's#^COPY --from=build /out/felix #COPY felix #'
}

if [[ "${1:-}" == "--print-dockerfile" ]]; then
  final_stage
  exit 0
fi
IMG="${1:-felix:dev}"
df="$(final_stage)"
if grep -q -- '--from=' <<<"${df}" || ! grep -q '^COPY felix ' <<<"${df}"; then
  echo "docker-build.sh: the Dockerfile's last stage no longer copies /out/felix from the build stage; update this script" >&2
  exit 1
fi
CTX="$(mktemp -d)"; trap 'rm -rf "${CTX}"' EXIT
export VERSION="${VERSION:-$(git -C "${ROOT}" describe --tags --always --dirty 2>/dev/null || echo dev)}"
export COMMIT="${COMMIT:-$(git -C "${ROOT}" rev-parse --short HEAD 2>/dev/null || true)}"
"${ROOT}/hack/build-felix.sh" "${CTX}/felix"
printf '%s\n' "${df}" > "${CTX}/Dockerfile"
args=()
[[ -n "${BASE:-}" ]] && args+=(--build-arg "BASE=${BASE}")
docker build "${args[@]}" -t "${IMG}" "${CTX}"
