//! skewgate: an L7 proxy that steers Kubernetes API traffic between apiserver versions during an upgrade.
//!
//! The crate is split into rooms, one job each (see design.md): `classify` turns a request head into the
//! apiserver's own RequestInfo, `config` turns route files into a validated route table, and `steer`
//! decides which backend serves a request and why.

pub mod admin;
pub mod classify;
pub mod config;
pub mod identity;
pub mod metrics;
pub mod proxy;
pub mod sim;
pub mod steer;
pub mod upstream;
