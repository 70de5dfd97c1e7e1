//! What skewgate and its simulated apiserver share, so that both answer alike: the Kubernetes
//! `Status` a failed request is answered with, and the accept loop of a listener.

pub mod accept;
pub mod status;

pub use accept::next_connection;
pub use status::{Cause, Status};
