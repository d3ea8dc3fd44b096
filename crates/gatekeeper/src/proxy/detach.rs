//! A future run in place, on the task that awaits it, that goes on in a task of its own if
//! that task drops it unfinished.
//!
//! Why: the upstream exchange must outlive a client that leaves (its permit is held until
//! the backend is done), but spawning it on every request costs a task, a channel and two
//! task wake-ups per request for the rare client that leaves. Here the exchange is polled
//! by the client connection's task, and only a drop before its end spawns the rest.

use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

/// Awaits `F` in place; dropped before `F` is done, it spawns `F` on the current runtime
/// and hands `F`'s output to `on_detach` there (with no runtime, at teardown, `F` is
/// dropped: whatever it holds is released and its connections close).
pub(super) struct Detachable<F: Future + Send + 'static>
where
    F::Output: Send + 'static,
{
    /// `None` once done (or detached).
    fut: Option<Pin<Box<F>>>,
    on_detach: fn(F::Output),
}

impl<F: Future + Send + 'static> Detachable<F>
where
    F::Output: Send + 'static,
{
    /// `fut` comes boxed: boxed where it is made, a large future is not copied again.
    pub(super) fn new(fut: Pin<Box<F>>, on_detach: fn(F::Output)) -> Self {
        Detachable { fut: Some(fut), on_detach }
    }
}

impl<F: Future + Send + 'static> Future for Detachable<F>
where
    F::Output: Send + 'static,
{
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let fut = self.fut.as_mut().expect("Detachable polled after completion");
        let out = ready!(fut.as_mut().poll(cx));
        self.fut = None;
        Poll::Ready(out)
    }
}

impl<F: Future + Send + 'static> Drop for Detachable<F>
where
    F::Output: Send + 'static,
{
    fn drop(&mut self) {
        let Some(fut) = self.fut.take() else { return };
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let then = self.on_detach;
            rt.spawn(async move { then(fut.await) });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    use std::time::Duration;

    static DETACHED_OUTPUTS: AtomicUsize = AtomicUsize::new(0);

    /// Awaited to its end it is a plain future; dropped midway, the rest runs on its own and
    /// its output goes to `on_detach`.
    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn runs_in_place_and_goes_on_alone_when_dropped() {
        let done = Detachable::new(Box::pin(async { 7 }), |_| panic!("not detached")).await;
        assert_eq!(done, 7);

        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let slow = Detachable::new(
            Box::pin(async move {
                tokio::time::sleep(Duration::from_millis(50)).await;
                let _ = tx.send(());
                5
            }),
            |n| {
                DETACHED_OUTPUTS.fetch_add(n, SeqCst);
            },
        );
        // Polled once (started), then dropped by a timeout.
        assert!(tokio::time::timeout(Duration::from_millis(10), slow).await.is_err());
        rx.await.expect("the detached future ran to its end");
        tokio::task::yield_now().await;
        assert_eq!(DETACHED_OUTPUTS.load(SeqCst), 5);
    }
}
