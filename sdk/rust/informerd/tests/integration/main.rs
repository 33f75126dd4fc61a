//! Integration tests against a real informerd on the fake API server (the `testing` feature).
//! Each test starts its own processes (both start in well under a second) and bounds every
//! call by a deadline.
mod client;
mod common;
mod controller;
mod informers;
mod kube;
mod leader;
mod queues;
mod reconnect;
mod store;
