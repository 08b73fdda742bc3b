# syntax=docker/dockerfile:1
# One image holding the `jobset` binary: `jobset manager` (the Deployment in config/) and
# `jobset agent` (the in-place restart agent) are its subcommands. Not built on the development
# machine (no registry access there); README "Run on a cluster" says how to build and load it.
#
#   docker build -t jobset-rs:0.1.0 --build-arg JOBSET_GIT_COMMIT=$(git rev-parse --short HEAD) .
#   docker build --target in-place-restart-agent -t <registry>/in-place-restart-agent:0.1.0 .

FROM rust:1.95-bookworm AS builder
WORKDIR /src
# What `jobset version` names as the commit: the context has no .git (.dockerignore), so the
# build cannot ask git; unset, it says "unknown".
ARG JOBSET_GIT_COMMIT
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p jobset-cli --bin jobset \
    && install -D target/release/jobset /out/jobset

# glibc and libgcc (what the binary links), CA certificates, no shell; user 65532 (nonroot).
# Nothing is written to the root filesystem: it runs with readOnlyRootFilesystem.
FROM gcr.io/distroless/cc-debian12:nonroot AS jobset
COPY --from=builder /out/jobset /usr/local/bin/jobset
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/jobset"]

# The same image running `jobset agent` by default, for upstream's in-place restart manifests,
# whose agent containers name only an image (registry.k8s.io/jobset/in-place-restart-agent).
FROM jobset AS in-place-restart-agent
CMD ["agent"]

# The default target: `jobset`, no default subcommand.
FROM jobset
