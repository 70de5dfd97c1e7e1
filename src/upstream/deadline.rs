//! Response deadlines without a timer each. A request that waits for its response head has a
//! deadline, and almost every request meets it: arming and disarming one of tokio's timers for each
//! (its wheel behind the driver's lock, re-registered at each poll, plus the `Timeout` around the
//! send) cost about 900 instructions per proxied GET (callgrind, docs/design.md). A worker is one
//! thread with its own runtime, so its requests' deadlines are instead one thread-local slab that a
//! ticker of the worker's own scans every `TICK`: arming a deadline is a slab insert, disarming it
//! a remove, no lock, no atomic. A deadline fires up to `TICK` late, never early; after the worker
//! stalled (its process frozen), a tick later, so that an answer that came meanwhile is read first.
//!
//! Off the workers (the admin runtime, tests that drive the pool directly) a deadline is one of
//! tokio's timers.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use slab::Slab;

/// How often a worker's ticker looks for deadlines that passed: how late one may fire. The
/// deadlines it serves are seconds long (the response timeout, a write's `fence - 2s`).
const TICK: Duration = Duration::from_millis(50);

/// A worker's armed deadlines.
struct Wheel {
    armed: Slab<Armed>,
    /// Counts arms, so that a slot reused by a later deadline is not taken for an earlier one.
    arms: u64,
    /// The ticker, parked while nothing is armed.
    ticker: Option<Waker>,
}

struct Armed {
    at: Instant,
    waker: Waker,
    arm: u64,
}

thread_local! {
    static WHEEL: RefCell<Wheel> = const {
        RefCell::new(Wheel { armed: Slab::new(), arms: 0, ticker: None })
    };
    /// The runtime this thread's ticker runs on.
    static TICKER_ON: Cell<Option<tokio::runtime::Id>> = const { Cell::new(None) };
    /// This thread, as a deadline knows its home.
    static THREAD: Cell<u64> = const { Cell::new(0) };
}

/// A number for the current thread, unique in the process.
fn this_thread() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    THREAD.with(|t| {
        if t.get() == 0 {
            t.set(NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
        }
        t.get()
    })
}

/// A send's deadline for its response head, armed at its first poll.
pub(crate) enum Deadline {
    /// Long-running requests wait as long as it takes.
    Never,
    /// Armed on a worker's wheel at its first poll: the thread, the slot and the arm.
    Wheel {
        at: Instant,
        slot: Option<(u64, usize, u64)>,
    },
    Tokio(Pin<Box<tokio::time::Sleep>>),
}

impl Deadline {
    /// A deadline at `at`, or none. On a worker it waits on the worker's wheel, elsewhere on one of
    /// tokio's timers.
    pub(crate) fn at(at: Option<Instant>) -> Deadline {
        let on_worker = crate::runtime::worker::current() < crate::runtime::worker::count();
        match at {
            None => Deadline::Never,
            Some(at) if on_worker => Deadline::Wheel { at, slot: None },
            Some(at) => Deadline::Tokio(Box::pin(tokio::time::sleep_until(at.into()))),
        }
    }

    /// `fut`'s output, or `None` once the deadline has passed and `fut` has not finished. As
    /// `tokio::time::timeout_at`, `fut` is polled first. (A future of its own, not an async fn: the
    /// send awaits three of these, and each async fn would hold `fut` again.)
    pub(crate) fn bound<F: Future + Unpin>(&mut self, fut: F) -> Bound<'_, F> {
        Bound {
            fut,
            deadline: self,
        }
    }

    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let (at, slot) = match self {
            Deadline::Never => return Poll::Pending,
            Deadline::Tokio(sleep) => return sleep.as_mut().poll(cx),
            Deadline::Wheel { at, slot } => (*at, slot),
        };
        let thread = this_thread();
        match *slot {
            None => {
                let (key, arm) = arm(at, cx.waker());
                *slot = Some((thread, key, arm));
                Poll::Pending
            }
            Some((home, key, arm)) if home == thread => WHEEL.with(|w| {
                let mut w = w.borrow_mut();
                match w.armed.get_mut(key) {
                    Some(a) if a.arm == arm => {
                        if !a.waker.will_wake(cx.waker()) {
                            a.waker = cx.waker().clone();
                        }
                        Poll::Pending
                    }
                    // The ticker took it: the deadline passed.
                    _ => Poll::Ready(()),
                }
            }),
            // Polled on another thread than it was armed on (not on a worker's runtime): the rest
            // of the wait is one of tokio's timers. The first arm fires at `at` and goes.
            Some(_) => {
                let mut sleep = Box::pin(tokio::time::sleep_until(at.into()));
                let polled = sleep.as_mut().poll(cx);
                *self = Deadline::Tokio(sleep);
                polled
            }
        }
    }
}

/// A future bound by a deadline (`Deadline::bound`).
pub(crate) struct Bound<'a, F> {
    fut: F,
    deadline: &'a mut Deadline,
}

impl<F: Future + Unpin> Future for Bound<'_, F> {
    type Output = Option<F::Output>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        if let Poll::Ready(out) = Pin::new(&mut this.fut).poll(cx) {
            return Poll::Ready(Some(out));
        }
        this.deadline.poll(cx).map(|()| None)
    }
}

impl Drop for Deadline {
    fn drop(&mut self) {
        if let Deadline::Wheel {
            slot: Some((home, key, arm)),
            ..
        } = *self
            && home == this_thread()
        {
            WHEEL.with(|w| {
                let mut w = w.borrow_mut();
                if w.armed.get(key).is_some_and(|a| a.arm == arm) {
                    w.armed.remove(key);
                }
            });
        }
    }
}

/// Arms a deadline on this worker's wheel. The first one armed on an empty wheel wakes the
/// worker's ticker if it was parked, or starts it if it is not running on this runtime; while the
/// wheel holds others, the ticker is running. Returns the slot and the arm.
fn arm(at: Instant, waker: &Waker) -> (usize, u64) {
    let (key, arm, first) = WHEEL.with(|w| {
        let mut w = w.borrow_mut();
        let first = w.armed.is_empty();
        w.arms += 1;
        let arm = w.arms;
        let key = w.armed.insert(Armed {
            at,
            waker: waker.clone(),
            arm,
        });
        (key, arm, first.then(|| w.ticker.take()))
    });
    if let Some(parked) = first {
        if let Some(t) = parked {
            t.wake();
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current()
            && TICKER_ON.with(Cell::get) != Some(runtime.id())
        {
            TICKER_ON.with(|r| r.set(Some(runtime.id())));
            runtime.spawn(tick());
        }
    }
    (key, arm)
}

/// Every `TICK` while deadlines are armed: wakes and disarms those that passed. Parks while none
/// is armed. Runs for as long as the worker's runtime does.
async fn tick() {
    let mut skipped = false;
    loop {
        let idle = std::future::poll_fn(|cx| {
            WHEEL.with(|w| {
                let mut w = w.borrow_mut();
                if w.armed.is_empty() {
                    w.ticker = Some(cx.waker().clone());
                    Poll::Pending
                } else {
                    Poll::Ready(())
                }
            })
        });
        idle.await;
        let due = Instant::now() + TICK;
        tokio::time::sleep(TICK).await;
        // Late by more than `STALLED`, the worker did not run (its process frozen, or starved):
        // answers that came meanwhile are read before any deadline is judged to have passed. One
        // tick only, so that a worker starved for good still fires its deadlines.
        let now = Instant::now();
        let stalled = now.saturating_duration_since(due) > STALLED;
        if stalled && !skipped {
            skipped = true;
            continue;
        }
        skipped = false;
        fire_passed(now);
    }
}

/// How late a tick comes when the worker has not run: the deadlines wait one tick more.
const STALLED: Duration = Duration::from_millis(500);

/// Disarms the deadlines that passed by `now`, and wakes their requests.
fn fire_passed(now: Instant) {
    let passed: Vec<Waker> = WHEEL.with(|w| {
        let mut w = w.borrow_mut();
        let mut passed = Vec::new();
        w.armed.retain(|_, a| {
            if a.at <= now {
                passed.push(a.waker.clone());
                false
            } else {
                true
            }
        });
        passed
    });
    for waker in passed {
        waker.wake();
    }
}

/// hyper's timers on the same wheel: the head of an HTTP/1.1 request must come within its header
/// timeout, armed for every request hyper waits for (a boxed tokio timer registered and dropped each
/// time: about 330 instructions per HTTP/1.1 GET, callgrind), and an HTTP/2 client connection's
/// keep-alive PINGs. Both are seconds long; the wheel's `TICK` is far within them.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct WheelTimer;

impl hyper::rt::Timer for WheelTimer {
    fn sleep(&self, duration: Duration) -> Pin<Box<dyn hyper::rt::Sleep>> {
        self.sleep_until(Instant::now() + duration)
    }

    fn sleep_until(&self, at: Instant) -> Pin<Box<dyn hyper::rt::Sleep>> {
        Box::pin(WheelSleep(Deadline::at(Some(at))))
    }
}

/// One of hyper's timers (`WheelTimer`).
struct WheelSleep(Deadline);

impl Future for WheelSleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.0.poll(cx)
    }
}

impl hyper::rt::Sleep for WheelSleep {}

#[cfg(test)]
#[path = "deadline_tests.rs"]
mod tests;
