//! Tests of `deadline.rs`.

use super::*;

/// A deadline on this thread's wheel, as on a worker.
fn on_wheel(at: Instant) -> Deadline {
    Deadline::Wheel { at, slot: None }
}

fn armed() -> usize {
    WHEEL.with(|w| w.borrow().armed.len())
}

/// `fut`, which must finish within 5 s (a deadline that never fires fails, not hangs).
async fn bounded<F: Future>(fut: F) -> F::Output {
    match tokio::time::timeout(Duration::from_secs(5), fut).await {
        Ok(out) => out,
        Err(_) => panic!("the deadline did not fire within 5 s"),
    }
}

#[tokio::test]
async fn a_future_that_finishes_in_time_leaves_nothing_armed() {
    let mut deadline = on_wheel(Instant::now() + Duration::from_secs(5));
    let slow = std::pin::pin!(async {
        tokio::time::sleep(Duration::from_millis(20)).await;
        7
    });
    assert_eq!(deadline.bound(slow).await, Some(7));
    assert_eq!(armed(), 1, "armed while its request may await more");
    drop(deadline);
    assert_eq!(armed(), 0, "disarmed when dropped");
}

#[tokio::test]
async fn a_deadline_fires_after_it_passes_and_not_before() {
    let begun = Instant::now();
    let mut deadline = on_wheel(begun + Duration::from_millis(200));
    let out = bounded(deadline.bound(std::future::pending::<()>())).await;
    assert_eq!(out, None);
    let took = begun.elapsed();
    assert!(took >= Duration::from_millis(200), "fired early: {took:?}");
    assert_eq!(armed(), 0, "the ticker disarmed it");
    // Passed, it stays passed for the next await.
    assert_eq!(deadline.bound(std::future::pending::<()>()).await, None);
}

#[tokio::test]
async fn deadlines_fire_each_at_their_own_time_and_a_dropped_one_never() {
    let begun = Instant::now();
    let short = tokio::spawn(async move {
        let mut deadline = on_wheel(begun + Duration::from_millis(100));
        deadline.bound(std::future::pending::<()>()).await
    });
    let mut long = on_wheel(begun + Duration::from_secs(60));
    {
        let mut waiting = std::pin::pin!(long.bound(std::future::pending::<()>()));
        // Armed at its first poll.
        let polled = std::future::poll_fn(|cx| Poll::Ready(waiting.as_mut().poll(cx))).await;
        assert!(polled.is_pending());
    }
    assert_eq!(bounded(short).await.ok(), Some(None));
    assert!(begun.elapsed() >= Duration::from_millis(100));
    assert_eq!(armed(), 1, "the long one waits on");
    drop(long);
    assert_eq!(armed(), 0, "dropped, it is disarmed");
}

#[tokio::test]
async fn no_deadline_never_fires() {
    let mut never = Deadline::at(None);
    let out = never
        .bound(Box::pin(tokio::time::sleep(Duration::from_millis(50))))
        .await;
    assert_eq!(out, Some(()));
    assert_eq!(armed(), 0);
}

#[tokio::test]
async fn hypers_timers_fire_and_are_disarmed_when_dropped() {
    use hyper::rt::Timer;
    // Off the workers (as here) the timer is tokio's; on a worker it is the wheel's.
    let begun = Instant::now();
    bounded(WheelTimer.sleep(Duration::from_millis(60))).await;
    assert!(begun.elapsed() >= Duration::from_millis(60));
    let mut sleep = WheelSleep(on_wheel(Instant::now() + Duration::from_millis(60)));
    bounded(std::future::poll_fn(|cx| Pin::new(&mut sleep).poll(cx))).await;
    assert!(begun.elapsed() >= Duration::from_millis(120));
    let long = WheelSleep(on_wheel(Instant::now() + Duration::from_secs(60)));
    let mut long = Box::pin(long);
    let polled = std::future::poll_fn(|cx| Poll::Ready(long.as_mut().poll(cx))).await;
    assert!(polled.is_pending());
    assert_eq!(armed(), 1);
    drop(long);
    assert_eq!(armed(), 0);
}

#[tokio::test]
async fn an_answer_that_came_while_the_worker_was_frozen_is_read_before_its_deadline_fires() {
    use tokio::io::AsyncReadExt;
    // The answer comes over a socket (read by a task of this runtime, as an upstream
    // connection's) 200 ms in, within the 400 ms deadline; the thread is frozen from 50 ms to
    // 1 s, so at once both the ticker's sleep has passed and the socket is readable.
    let (mut ours, theirs) = std::os::unix::net::UnixStream::pair().expect("pair");
    theirs.set_nonblocking(true).expect("nonblocking");
    let mut theirs = tokio::net::UnixStream::from_std(theirs).expect("tokio stream");
    let (tx, rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let mut byte = [0u8; 1];
        if theirs.read_exact(&mut byte).await.is_ok() {
            let _ = tx.send(byte[0]);
        }
    });
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        let _ = std::io::Write::write_all(&mut ours, &[7]);
        std::thread::sleep(Duration::from_secs(2));
    });
    let begun = Instant::now();
    let mut deadline = on_wheel(begun + Duration::from_millis(400));
    let mut waiting = std::pin::pin!(deadline.bound(rx));
    let polled = std::future::poll_fn(|cx| Poll::Ready(waiting.as_mut().poll(cx))).await;
    assert!(polled.is_pending());
    tokio::time::sleep(Duration::from_millis(50)).await;
    std::thread::sleep(Duration::from_millis(950));
    let out = bounded(waiting).await;
    assert_eq!(out, Some(Ok(7)), "the answer, not the deadline");
}
