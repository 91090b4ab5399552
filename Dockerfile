# syntax=docker/dockerfile:1

# Build stage: static binaries of the server and the load harness. The module
# download is its own layer so an edit to the code does not refetch modules,
# and the cache mounts keep modules and compiled packages between builds.
FROM --platform=$BUILDPLATFORM golang:1.26 AS build
ARG TARGETOS TARGETARCH
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod \
    go mod download
COPY . .
# CGO is off so the binaries run on an image without libc; the embedded SQLite
# store is pure Go, so nothing is lost.
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -ldflags "-s -w" -o /out/seckill ./cmd/seckill && \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -ldflags "-s -w" -o /out/loadtest ./loadtest

# Final stage: no shell, no package manager, no root. CA certificates are not
# needed: the service only speaks plain TCP to Redis and MySQL on the compose
# network.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/seckill /seckill
COPY --from=build /out/loadtest /loadtest
USER nonroot:nonroot
# The server's own default is 127.0.0.1:8080, safe on a laptop but unreachable
# from outside a container; inside one, only published ports are exposed.
ENV HTTP_ADDR=0.0.0.0:8080
EXPOSE 8080
ENTRYPOINT ["/seckill"]
