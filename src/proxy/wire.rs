//! What the request pipeline asks of the wire it is served on (`crate::edge`), and nothing more:
//! a request's body as the client's stream delivers it, the wire's own bookkeeping that a
//! response carries while it lasts (the stream's reset guard, an HTTP/1.1 connection's exchange),
//! and what the keeper of a client's connection hears of its requests (`ConnectionPolicy`).
//! The edge implements these; the pipeline names no type of the edge's, so the rooms depend one
//! way only (edge → proxy).

use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;

/// What the pipeline tells the keeper of a client's connection (the edge) about its requests: the
/// edge holds clients to their conduct (offenders, rebalancing), the pipeline only reports. One
/// per connection, made by the edge.
pub(crate) trait ConnectionPolicy: Send + Sync + 'static {
    /// A request of the connection's client failed by its fault; counted towards holding the
    /// client back.
    fn client_fault(&self);
    /// How long a request of the client's that failed by its fault waits before it is answered: a
    /// client known only by its address, while it is held back, is served on probation.
    fn probation(&self) -> Option<Duration>;
    /// A response was made; one that is not `long_running` may draw the connection's GOAWAY.
    fn answered(&self, long_running: bool);
}

/// A client stream's side of a request body (the HTTP/2 server's streams, `edge::http2`).
pub(crate) trait StreamSource: Send + Sync {
    /// The next data or trailers of stream `key`; `None` at the end. `ended` is set once the body
    /// is known to be at its end.
    fn poll_frame(
        &self,
        key: usize,
        ended: &mut bool,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, h2::Error>>>;

    /// The body of stream `key` is dropped: what came and was not read is let go.
    fn body_dropped(&self, key: usize);
}

/// A request's body read off a client's HTTP/2 stream.
pub(crate) struct StreamBody {
    /// `None` for a request that ended with its head (most of them): nothing to read, no lock.
    stream: Option<(Arc<dyn StreamSource>, usize)>,
    ended: bool,
}

impl std::fmt::Debug for StreamBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamBody")
            .field("stream", &self.stream.as_ref().map(|(_, key)| key))
            .field("ended", &self.ended)
            .finish()
    }
}

impl StreamBody {
    /// The body of stream `key` of `source`; none to read when the request's head ended it.
    pub(crate) fn new(source: Arc<dyn StreamSource>, key: usize, end_stream: bool) -> StreamBody {
        StreamBody {
            stream: (!end_stream).then_some((source, key)),
            ended: end_stream,
        }
    }

    /// Whether the body is known to be at its end (as of the last poll).
    pub(crate) fn is_end_stream(&self) -> bool {
        self.ended
    }

    /// The next data or trailers; `None` at the end.
    pub(crate) fn poll_frame(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, h2::Error>>> {
        match &self.stream {
            Some((source, key)) => source.poll_frame(*key, &mut self.ended, cx),
            None => Poll::Ready(None),
        }
    }
}

impl Drop for StreamBody {
    fn drop(&mut self) {
        if let Some((source, key)) = self.stream.take() {
            source.body_dropped(key);
        }
    }
}

/// What learns how a client's stream ended (the connection's reset budget, `edge::resets`).
pub(crate) trait StreamEnd: Send + Sync {
    /// The stream opened at `started` was let go of; `done` when its response had ended.
    fn stream_dropped(&self, started: Instant, done: bool);
}

/// One stream of a client connection, carried by its response's body: told whether the response
/// ended before the client let go of it.
pub(crate) struct StreamGuard {
    owner: Arc<dyn StreamEnd>,
    started: Instant,
    done: bool,
}

impl std::fmt::Debug for StreamGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamGuard")
            .field("started", &self.started)
            .field("done", &self.done)
            .finish()
    }
}

impl StreamGuard {
    pub(crate) fn new(owner: Arc<dyn StreamEnd>, started: Instant) -> StreamGuard {
        StreamGuard {
            owner,
            started,
            done: false,
        }
    }

    /// When the stream was opened.
    pub(crate) fn started(&self) -> Instant {
        self.started
    }

    /// The stream's response has ended (or failed on the apiserver's side).
    pub(crate) fn done(&mut self) {
        self.done = true;
    }
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        self.owner.stream_dropped(self.started, self.done);
    }
}

/// What learns that an HTTP/1.1 request's response is over (the connection's exchanges,
/// `edge::keepalive`): until then the connection is not idle.
pub(crate) trait ExchangeEnd: Send + Sync {
    fn exchange_ended(&self);
    /// The response switched protocols: the connection is a tunnel now.
    fn upgraded(&self);
}

/// One request under way on an HTTP/1.1 connection; carried by its response's body.
pub(crate) struct Exchange(Arc<dyn ExchangeEnd>);

impl Exchange {
    pub(crate) fn new(owner: Arc<dyn ExchangeEnd>) -> Exchange {
        Exchange(owner)
    }

    /// The response switches protocols: the stream becomes a tunnel and is never given back.
    pub(crate) fn upgraded(&self) {
        self.0.upgraded();
    }
}

impl Drop for Exchange {
    fn drop(&mut self) {
        self.0.exchange_ended();
    }
}
