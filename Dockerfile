# Multi-stage build: a release binary on a distroless runtime with no shell, run as non-root.
FROM rust:1.95-bookworm AS build
WORKDIR /src
# Everything the manifest names (sources, benches, examples); .dockerignore keeps out the rest.
COPY . .
RUN cargo build --release --locked --bin stateful-admission

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /src/target/release/stateful-admission /usr/local/bin/stateful-admission
USER 65532:65532
EXPOSE 8443 8080
ENTRYPOINT ["/usr/local/bin/stateful-admission"]
CMD ["serve"]
