//! The `informerd.v1` gRPC API, generated from the repository's `proto/` by `informerd-api-gen`
//! into `src/generated/` (checked in, so the crate builds without `protoc`):
//! prost messages and tonic clients for the `Informers`, `Queues`, `Work` and `Admin` services.
//! The `.proto` comments are the reference for every message; the `informerd` crate is the
//! SDK built on them.
#![allow(clippy::all, missing_docs)]

/// informerd.v1: every message, enum and client of the API.
// The .proto comments are prose, not rustdoc: `<cluster>` in them is no HTML tag.
#[allow(rustdoc::all)]
pub mod v1 {
    include!("generated/informerd.v1.rs");
}
