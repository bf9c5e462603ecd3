# The felix image: one static binary, several roles (`felix operator`,
# `felix broker`, `felix restore-point` and the client commands).
#
#   docker build --build-arg VERSION=0.1.0 -t felix:0.1.0 .
#
# builds it from source in a Go builder image. A machine that cannot pull
# (no registry) builds the binary on the host with the same script and uses
# only the last stage of this file: hack/docker-build.sh (docs/install.md).
ARG GO_IMAGE=golang:1.26.8-bookworm
ARG BASE=gcr.io/distroless/static-debian12:nonroot

FROM ${GO_IMAGE} AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
ARG COMMIT=
RUN VERSION="${VERSION}" COMMIT="${COMMIT}" hack/build-felix.sh /out/felix

# The image. hack/docker-build.sh builds this stage alone from a host-built
# binary (it replaces the COPY --from=build source): keep it last.
FROM ${BASE}
COPY --from=build /out/felix /usr/local/bin/felix
# 65532 is distroless's "nonroot"; numeric so it also works on scratch and
# satisfies runAsNonRoot.
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/felix"]
CMD ["--help"]
