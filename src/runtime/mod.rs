//! The process's threads as the rooms see them, with no I/O: which worker thread the current code
//! runs on (`worker`: each worker's own pool shard, metrics copy and routing), and the time of a
//! turn of a connection's task, read once for the turn (`turn`: begun by the edge, read by the
//! pipeline for a request's duration).

pub(crate) mod turn;
pub(crate) mod worker;
