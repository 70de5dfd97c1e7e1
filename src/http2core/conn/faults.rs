//! What the peer's faults come to on a connection: streams reset for them and counted against it,
//! and frames on streams closed and forgotten (`closed.rs`), judged as h2 judges them.

use h2::Reason;
use h2::frame::{Reset, StreamId};

use super::{Conn, Role};
use crate::http2core::closed::{Gone, Verdict};

impl<A> Conn<A> {
    /// Resets stream `id` for the peer's fault, counted against it: past the bound, GOAWAY
    /// ENHANCE_YOUR_CALM (h2's and hyper's answer to a peer that makes it reset too many).
    pub(crate) fn refuse(&mut self, id: StreamId, reason: Reason) {
        self.push(Reset::new(id, reason).into());
        self.local_resets += 1;
        if self.local_resets > self.bounds.max_local_resets {
            tracing::debug!("an HTTP/2 peer made skewgate reset too many streams; GOAWAY");
            self.go_away(Reason::ENHANCE_YOUR_CALM);
        }
    }

    /// The streams reset for the peer's fault since the last call.
    pub(crate) fn faults(&mut self) -> usize {
        let new = self.local_resets - self.told_resets;
        self.told_resets = self.local_resets;
        new
    }

    /// A stream skewgate no longer holds, remembered by how it closed for the frames in flight.
    pub(crate) fn remember(&mut self, id: StreamId, gone: Gone) {
        self.closed.remember(u32::from(id), gone);
    }

    /// HEADERS on a stream opened before and no longer held. The server's: as the stream closed
    /// says, and on one forgotten (or never opened: a lower id than one opened since) GOAWAY
    /// PROTOCOL_ERROR (5.1.1), as h2 answers it. The client's: ignored, as h2's client ignores a
    /// frame on a stream it may have forgotten (a response head in flight when skewgate reset the
    /// stream).
    pub(crate) fn closed_headers(&mut self, id: StreamId, end: bool) {
        if self.role == Role::Client {
            return;
        }
        match self.closed.get_mut(u32::from(id)) {
            Some(gone) => {
                let verdict = gone.on_headers(end);
                self.judge(id, verdict, 0);
            }
            None => self.go_away(Reason::PROTOCOL_ERROR),
        }
    }

    /// DATA of `flow` bytes on a stream opened before and no longer held, its length given back.
    /// The server's: as the stream closed says, on one forgotten RST_STREAM STREAM_CLOSED, as h2
    /// answers it. The client's: ignored (as `closed_headers`).
    pub(crate) fn closed_data(&mut self, id: StreamId, flow: usize, end: bool) {
        if self.role == Role::Client {
            return self.give_back(flow);
        }
        let verdict = match self.closed.get_mut(u32::from(id)) {
            Some(gone) => gone.on_data(flow, end),
            None => Verdict::StreamError,
        };
        self.judge(id, verdict, flow);
    }

    /// What a frame on a closed stream comes to, carried out; `flow`, its flow-controlled length,
    /// given back to the connection's window.
    pub(crate) fn judge(&mut self, id: StreamId, verdict: Verdict, flow: usize) {
        self.give_back(flow);
        match verdict {
            Verdict::Ignore => {}
            Verdict::StreamError => self.refuse(id, Reason::STREAM_CLOSED),
            Verdict::ConnectionError => self.go_away(Reason::STREAM_CLOSED),
        }
    }

    /// A stream the server refused as it opened (malformed, over a limit, after GOAWAY): the peer
    /// may have its body in flight.
    pub(crate) fn refused(&mut self, id: StreamId, end_stream: bool, window: u32) {
        let gone = if end_stream {
            Gone::Closed
        } else {
            Gone::Reset {
                window: i64::from(window),
            }
        };
        self.remember(id, gone);
    }

    /// The server's: a stream the codec found malformed before it was opened here (its header
    /// block): taken as opened and refused, so that its id is not opened again.
    pub(crate) fn refuse_unopened(&mut self, id: StreamId, reason: Reason, window: u32) {
        let raw = u32::from(id);
        if self.role == Role::Server && raw % 2 == 1 && raw > self.last_id {
            self.last_id = raw;
            self.refused(id, false, window);
        }
        self.refuse(id, reason);
    }
}
