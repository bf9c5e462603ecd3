# One image, one binary, several roles: `felix operator`, `felix broker`,
# `felix restore-point` and the client commands.
#
# The binary is built on the host (static, CGO_ENABLED=0) by
# hack/docker-build.sh and copied in, so the image needs no toolchain image.
# BASE defaults to distroless static (non-root); machines that cannot pull
# pass BASE=scratch.
ARG BASE=gcr.io/distroless/static-debian12:nonroot
FROM ${BASE}
COPY felix /usr/local/bin/felix
# 65532 is distroless's "nonroot"; numeric so it also works on scratch.
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/felix"]
CMD ["--help"]
