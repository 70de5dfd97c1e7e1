//! What skewgate and its simulated apiserver share, so that both answer alike: the Kubernetes
//! `Status` a failed request is answered with, how a query string is read (as Go reads it), how a
//! listener is bound and its accept loop.

pub mod accept;
pub mod go_query;
pub mod listen;
pub mod status;

pub use accept::next_connection;
pub use listen::listen;
pub use status::{Cause, Status};
