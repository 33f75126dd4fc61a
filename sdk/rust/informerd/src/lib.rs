// The README is the crate's front page. Its examples need the `kube` feature: a plain
// `cargo test` (without it) does not run them as doctests; with it (make test-rust) they do.
#![cfg_attr(any(not(doctest), feature = "kube"), doc = include_str!("../README.md"))]
#![warn(missing_docs)]

pub mod admin;
pub mod client;
pub mod controller;
pub mod error;
pub mod informers;
#[cfg(feature = "kube")]
pub mod kube;
pub mod metrics;
pub mod object;
pub mod queues;
pub mod resource;
pub mod store;
#[cfg(feature = "testing")]
pub mod testing;

pub use admin::{Admin, Replica, ReplicaRole};
pub use client::{Backoff, Client, ConnectOptions, Route};
pub use controller::{
    Action, Context, Controller, ReconcileEvent, ReconcileEventKind, WatchConfig,
};
pub use error::{Error, ErrorReason, Result};
pub use informers::{
    Event, IndexSpec, Informer, InformerSpec, Informers, ListParams, Transform, Watch, WatchParams,
};
pub use object::Object;
pub use queues::{AddOpts, Predicate, QueueSpec, Queues, RateLimiter, Source};
pub use resource::Resource;
pub use store::{Store, StoreBuilder};

/// The generated API (`informerd.v1`), for calls the typed API does not cover.
pub use informerd_api::v1;
