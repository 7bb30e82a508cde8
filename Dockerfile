# syntax=docker/dockerfile:1
# The one Boxoffice binary, every role: `docker run boxoffice serve|relay|work|migrate|audit`.

FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
# The Go client is a module of its own that go.mod replaces with ./client.
COPY client/go.mod client/go.sum ./client/
RUN go mod download
COPY . .
# Static (no cgo), reproducible (-trimpath), without debug tables; the
# version and commit for `boxoffice version` come from the build
# (docker build --build-arg VERSION=… --build-arg COMMIT=$(git rev-parse HEAD)).
ARG VERSION=dev
ARG COMMIT=unknown
RUN CGO_ENABLED=0 go build -trimpath \
    -ldflags="-s -w -X boxoffice/cmd/boxoffice/roles.Version=${VERSION} -X boxoffice/cmd/boxoffice/roles.Commit=${COMMIT}" \
    -o /out/boxoffice ./cmd/boxoffice

# distroless/static: no shell, no package manager; runs as uid 65532.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/boxoffice /boxoffice
USER nonroot:nonroot
EXPOSE 8080 9090
ENTRYPOINT ["/boxoffice"]
CMD ["serve"]
