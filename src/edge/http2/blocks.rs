//! The bound, for the whole process, on header blocks begun and not finished: a HEADERS frame
//! without END_HEADERS holds what its CONTINUATION frames decode until the block ends, up to the
//! header-list bound (two of `--max-header-list-size`'s, with the buffers: about 152 KB). A client
//! that never ends its block held that per connection for as long as the connection lived: 2,000
//! connections held 305 MB. Each connection with a block in progress at the end of a turn is
//! charged the header-list bound against `BOUND`; one that finds it spent is ended at once with
//! GOAWAY ENHANCE_YOUR_CALM (a fault of its client's), as HAProxy ends a block that does not fit
//! its buffer. Clients that send their heads whole never hold a charge past their turn.

use std::sync::atomic::{AtomicUsize, Ordering};

/// Bytes of header blocks in progress the process holds at most: 128 blocks at the default
/// header-list bound.
pub(crate) const BOUND: usize = 16 << 20;

/// What the connections with a block in progress are charged now.
static CHARGED: AtomicUsize = AtomicUsize::new(0);

/// One connection's charge, given back when its block ends or it is dropped.
#[derive(Debug, Default)]
pub(super) struct Charge {
    held: usize,
}

impl Charge {
    /// Follows the connection's block: `in_progress` charged `size` (false when the bound is
    /// spent: the connection is to end), or given back once it ended.
    pub(super) fn follow(&mut self, in_progress: bool, size: usize) -> bool {
        match (in_progress, self.held) {
            (true, 0) => {
                let before = CHARGED.fetch_add(size, Ordering::AcqRel);
                if before + size > BOUND {
                    CHARGED.fetch_sub(size, Ordering::AcqRel);
                    return false;
                }
                self.held = size;
                true
            }
            (false, held) if held > 0 => {
                CHARGED.fetch_sub(held, Ordering::AcqRel);
                self.held = 0;
                true
            }
            _ => true,
        }
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        if self.held > 0 {
            CHARGED.fetch_sub(self.held, Ordering::AcqRel);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_in_progress_are_charged_up_to_the_bound_and_given_back() {
        let size = BOUND / 4;
        let mut charges: Vec<Charge> = (0..4).map(|_| Charge::default()).collect();
        for c in &mut charges {
            assert!(c.follow(true, size));
        }
        let mut fifth = Charge::default();
        assert!(!fifth.follow(true, size), "the bound is spent");
        // A block that ended gives its charge back; a connection dropped too.
        assert!(charges[0].follow(false, size));
        assert!(fifth.follow(true, size));
        charges.truncate(1);
        let mut sixth = Charge::default();
        assert!(sixth.follow(true, size));
    }
}
