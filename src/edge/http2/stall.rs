//! A connection's stall as the response budget sees it (`upstream/stalls.rs`): listed while it
//! holds response data unwritten and its socket takes no more, its stall begun at the last DATA
//! frame it took; cut by the budget when the budget is spent, a reader waits for room, and it has
//! taken nothing for longest.

use std::sync::Arc;
use std::task::Waker;

use crate::upstream::ResponseBudget;
use crate::upstream::stalls::Stall;

#[derive(Debug, Default)]
pub(super) struct Stalled {
    /// Listed: its key in the budget's list, the stall, and the budget to leave it.
    listed: Option<(usize, Arc<Stall>, Arc<ResponseBudget>)>,
    /// DATA frames written as of the last turn.
    written: u64,
}

impl Stalled {
    /// Whether the budget cut the connection.
    pub(super) fn is_cut(&self) -> bool {
        self.listed.as_ref().is_some_and(|(_, s, _)| s.is_cut())
    }

    /// After a turn: `stalled` when it holds data unwritten and the socket took no more; `written`
    /// the DATA frames handed to the codec so far.
    pub(super) fn follow(
        &mut self,
        budget: &Arc<ResponseBudget>,
        stalled: bool,
        written: u64,
        waker: &Waker,
    ) {
        let progressed = std::mem::replace(&mut self.written, written) != written;
        match (&self.listed, stalled) {
            (None, true) => {
                let now = crate::runtime::turn::now();
                let (key, stall) = budget.stalls().enter(now, waker);
                self.listed = Some((key, stall, budget.clone()));
            }
            (Some((_, stall, budget)), true) if progressed => {
                budget.stalls().progress(stall, crate::runtime::turn::now());
            }
            (Some(_), false) => self.leave(),
            _ => {}
        }
    }

    fn leave(&mut self) {
        if let Some((key, _, budget)) = self.listed.take() {
            budget.stalls().leave(key);
        }
    }
}

impl Drop for Stalled {
    fn drop(&mut self) {
        self.leave();
    }
}
