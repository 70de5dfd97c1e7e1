//! The accept loop of a TCP listener, shared by the proxy, its admin listener and the simulator.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

/// The first pause after a failed accept; it doubles with each failure in a row.
const FIRST_PAUSE: Duration = Duration::from_millis(10);
/// The longest pause.
const LONGEST_PAUSE: Duration = Duration::from_secs(1);

/// The next connection on `listener` (with `TCP_NODELAY` set), or `None` once `stop` fires.
///
/// An accept fails when the process is out of descriptors (EMFILE) or memory, or the peer gave up
/// before it was accepted. Retrying at once would spin a core and starve every other task on the
/// thread; so it pauses, 10 ms doubling up to 1 s while failures continue, and says so in the log
/// (`what` names the listener).
pub async fn next_connection(
    listener: &TcpListener,
    stop: &CancellationToken,
    what: &str,
) -> Option<(TcpStream, SocketAddr)> {
    let mut pause = FIRST_PAUSE;
    loop {
        let accepted = tokio::select! {
            r = listener.accept() => r,
            _ = stop.cancelled() => return None,
        };
        match accepted {
            Ok((stream, remote)) => {
                let _ = stream.set_nodelay(true);
                return Some((stream, remote));
            }
            Err(e) => {
                tracing::warn!(listener = what, error = %e, pause = ?pause, "accept failed; backing off");
                tokio::select! {
                    _ = tokio::time::sleep(pause) => {}
                    _ = stop.cancelled() => return None,
                }
                pause = (pause * 2).min(LONGEST_PAUSE);
            }
        }
    }
}
