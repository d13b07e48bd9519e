//! A stop signal shared by every task of the local stack.

use tokio::sync::watch;

/// Sender side: [`StopSource::stop`] asks every task holding a [`Stop`] to finish.
#[derive(Debug)]
pub struct StopSource(watch::Sender<bool>);

/// Receiver side, cheap to clone.
#[derive(Debug, Clone)]
pub struct Stop(watch::Receiver<bool>);

impl StopSource {
    pub fn new() -> (Self, Stop) {
        let (tx, rx) = watch::channel(false);
        (Self(tx), Stop(rx))
    }

    pub fn stop(&self) {
        self.0.send_replace(true);
    }

    pub fn token(&self) -> Stop {
        Stop(self.0.subscribe())
    }
}

impl Stop {
    pub fn is_stopped(&self) -> bool {
        *self.0.borrow()
    }

    /// Resolves once a stop has been asked (at once if it already was).
    pub async fn stopped(&mut self) {
        // An error means the source is gone: nothing can ask us to run any longer.
        let _ = self.0.wait_for(|v| *v).await;
    }

    /// Sleeps for `d`, or less when a stop is asked. True when stopped.
    pub async fn sleep(&mut self, d: std::time::Duration) -> bool {
        tokio::select! {
            () = tokio::time::sleep(d) => self.is_stopped(),
            () = self.stopped() => true,
        }
    }
}
