//! Spreading long-lived client connections again. Kubelets keep their connection for days, so a
//! replica added or back from a restart would get none of them. As kube-apiserver's
//! `--goaway-chance` does, a small fraction of HTTP/2 requests (never a watch or another
//! long-running one) is answered and then its connection is sent GOAWAY: the streams open on it
//! finish, and the client's next requests open a new connection, which the load balancer in front
//! may send to another replica.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::Notify;

/// The largest chance, as kube-apiserver allows (`--goaway-chance` at most 0.02).
pub(crate) const MAX_CHANCE: f64 = 0.02;

/// One in this many is the unit of a chance.
const PER: u32 = 1_000_000;

/// A client HTTP/2 connection's GOAWAY, once one of its requests drew it.
#[derive(Default)]
pub(crate) struct Goaway {
    drawn: AtomicBool,
    notify: Notify,
}

impl Goaway {
    /// After a request's response: draws with `chance` (per million) unless the request is
    /// long-running or the connection is going away already. Returns whether it drew.
    pub(crate) fn after_response(&self, chance: u32, long_running: bool) -> bool {
        if long_running || self.drawn.load(Ordering::Relaxed) || draw() >= chance {
            return false;
        }
        if self.drawn.swap(true, Ordering::Relaxed) {
            return false;
        }
        self.notify.notify_one();
        true
    }

    /// Resolves once a request drew the GOAWAY.
    pub(crate) async fn drawn(&self) {
        self.notify.notified().await;
    }
}

/// A chance (0 to `MAX_CHANCE`) in millionths.
pub(crate) fn per_million(chance: f64) -> u32 {
    (chance.clamp(0.0, MAX_CHANCE) * f64::from(PER)).round() as u32
}

/// A number in 0..PER from a per-thread xorshift: no lock, no allocation.
fn draw() -> u32 {
    thread_local! {
        static STATE: Cell<u64> = Cell::new(seed());
    }
    STATE.with(|s| {
        let mut x = s.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        s.set(x);
        (x % u64::from(PER)) as u32
    })
}

fn seed() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let here = &nanos as *const u64 as u64;
    (nanos ^ here.rotate_left(32)) | 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chance_is_drawn_about_as_often_as_asked_and_never_for_long_running_requests() {
        let chance = per_million(0.01);
        let drawn = (0..200_000)
            .filter(|_| Goaway::default().after_response(chance, false))
            .count();
        assert!((1_000..3_000).contains(&drawn), "{drawn} of 200,000 at 1 %");
        let g = Goaway::default();
        assert!(!(0..10_000).any(|_| g.after_response(per_million(0.02), true)));
        assert_eq!(per_million(0.5), 20_000, "capped as kube-apiserver caps it");
        // Once drawn, a connection is going away: no second GOAWAY.
        let once = Goaway::default();
        assert!(once.after_response(PER, false));
        assert!(!once.after_response(PER, false));
    }
}
