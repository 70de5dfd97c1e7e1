//! What a client connection watches beside its requests (the server stopping, a rebalancing GOAWAY
//! drawn, the first-request deadline, the reset budget used up), polled only when one of those
//! wakes the connection.
//!
//! A connection's task is woken several times per request (the request arrives, its response
//! arrives, the response is written), and `tokio::select!` polls every branch on every wake. A
//! waiting `Notified` (under `CancellationToken::cancelled` and `Goaway::drawn`) takes its
//! `Notify`'s mutex on each poll; the server's stop token is one for every connection, so that was
//! a lock shared by every request on every worker (with the rest of the polling, about 300
//! instructions per HTTP/1.1 GET, `bench/instructions.sh`). Here the signals get a waker of their
//! own, which marks them woken before it wakes the task: a wake that is not theirs costs one
//! atomic load.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Wake, Waker};

use futures_util::task::AtomicWaker;

/// Runs `main` to its end unless `signal` resolves first: `Ok` with `main`'s output, or `Err` with
/// the signal's. `signal` is polled once at first (to register its interest), and after that only
/// when it woke the task.
pub(super) fn unless<M, S>(main: M, signal: S) -> Unless<M, S>
where
    M: Future + Unpin,
    S: Future + Unpin,
{
    let flag = Arc::new(Flag {
        // Set, so that the first poll polls the signal.
        woken: AtomicBool::new(true),
        task: AtomicWaker::new(),
    });
    Unless {
        main,
        signal,
        signal_waker: Waker::from(flag.clone()),
        flag,
        registered: None,
    }
}

pub(super) struct Unless<M, S> {
    main: M,
    signal: S,
    flag: Arc<Flag>,
    /// The waker the signal is polled with: it sets `flag` and wakes the task.
    signal_waker: Waker,
    /// The task's waker as last registered in `flag`.
    registered: Option<Waker>,
}

/// Whether the signal woke the task since it was last polled, and the task to wake.
struct Flag {
    woken: AtomicBool,
    task: AtomicWaker,
}

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        self.task.wake();
    }
}

impl<M, S> Future for Unless<M, S>
where
    M: Future + Unpin,
    S: Future + Unpin,
{
    type Output = Result<M::Output, S::Output>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        // A wake of the signal's takes the task's waker from `flag`: registered again before the
        // flag is cleared, so that a wake between the two is not lost.
        let moved = !this
            .registered
            .as_ref()
            .is_some_and(|w| w.will_wake(cx.waker()));
        if moved || this.flag.woken.load(Ordering::Acquire) {
            this.flag.task.register(cx.waker());
            if moved {
                this.registered = Some(cx.waker().clone());
            }
        }
        if this.flag.woken.swap(false, Ordering::AcqRel) {
            let mut signal_cx = Context::from_waker(&this.signal_waker);
            if let Poll::Ready(s) = Pin::new(&mut this.signal).poll(&mut signal_cx) {
                return Poll::Ready(Err(s));
            }
        }
        Pin::new(&mut this.main).poll(cx).map(Ok)
    }
}

#[cfg(test)]
mod tests {
    use std::future::poll_fn;
    use std::pin::pin;
    use std::sync::atomic::AtomicUsize;
    use std::time::Duration;

    use tokio::sync::Notify;

    use super::*;

    /// A future that counts its polls and never resolves.
    fn counted(polls: &AtomicUsize) -> impl Future<Output = ()> + '_ {
        poll_fn(move |_| {
            polls.fetch_add(1, Ordering::Relaxed);
            Poll::Pending
        })
    }

    #[tokio::test]
    async fn the_signal_is_polled_only_when_it_woke_the_task() {
        let signal_polls = AtomicUsize::new(0);
        let kick = Notify::new();
        let main = pin!(async {
            for _ in 0..5 {
                kick.notified().await;
            }
        });
        let signal = pin!(counted(&signal_polls));
        let mut both = pin!(unless(main, signal));
        let mut polls = 0;
        let done = poll_fn(|cx| {
            polls += 1;
            both.as_mut().poll(cx)
        });
        let kicker = async {
            for _ in 0..5 {
                tokio::time::sleep(Duration::from_millis(1)).await;
                kick.notify_one();
            }
        };
        let (out, ()) = tokio::join!(done, kicker);
        assert!(out.is_ok(), "main ended first");
        assert!(polls >= 6, "main was woken and polled: {polls}");
        assert_eq!(
            signal_polls.load(Ordering::Relaxed),
            1,
            "only the first poll"
        );
    }

    #[tokio::test]
    async fn a_signal_that_fires_ends_it_and_main_is_left_as_it_was() {
        let stop = Arc::new(Notify::new());
        let main_polls = AtomicUsize::new(0);
        let mut main = pin!(counted(&main_polls));
        let signal = pin!(stop.notified());
        let stopper = stop.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(5)).await;
            stopper.notify_one();
        });
        let out = unless(main.as_mut(), signal).await;
        assert!(out.is_err(), "the signal ended it");
        let before = main_polls.load(Ordering::Relaxed);
        assert!(before >= 1);
        // The caller can go on with main (a connection closing gracefully).
        let waker = Waker::noop();
        let _ = main.as_mut().poll(&mut Context::from_waker(waker));
        assert_eq!(main_polls.load(Ordering::Relaxed), before + 1);
    }

    #[tokio::test]
    async fn a_signal_woken_from_another_thread_is_not_lost() {
        for i in 0..200 {
            let stop = Arc::new(Notify::new());
            let signal = pin!(stop.notified());
            let main = pin!(std::future::pending::<()>());
            let stopper = stop.clone();
            // Half of them fire while the first poll is under way or about to be.
            let t = std::thread::spawn(move || {
                if i % 2 == 0 {
                    std::thread::sleep(Duration::from_micros(50));
                }
                stopper.notify_one();
            });
            let out = tokio::time::timeout(Duration::from_secs(5), unless(main, signal)).await;
            t.join().unwrap();
            assert!(matches!(out, Ok(Err(()))), "the stop was seen");
        }
    }
}
