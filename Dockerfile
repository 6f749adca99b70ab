# Build a static manager binary, then ship it alone on a distroless non-root base.
FROM golang:1.26 AS builder
ARG TARGETOS=linux
ARG TARGETARCH
WORKDIR /workspace
# Dependencies first, so that source edits reuse the module layer.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} go build -trimpath -ldflags="-s -w" -o manager ./cmd

FROM gcr.io/distroless/static-debian12:nonroot
WORKDIR /
COPY --from=builder /workspace/manager /manager
USER 65532:65532
ENTRYPOINT ["/manager"]
