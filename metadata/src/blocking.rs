//! Blocking work (file reads, redb transactions) run from async code: [`run_blocking`].
//!
//! On a multi-thread runtime (the broker) it goes to tokio's blocking pool, so a slow disk
//! does not hold up an async worker. On a current-thread runtime (unit tests, the
//! deterministic simulation) it runs inline: the blocking pool's threads would finish in
//! an order the OS picks, and the simulation's runs must be a function of their seed.
//! Every caller is short (a file read, a small transaction), so blocking that one thread
//! briefly is the cheaper trade there.

use tokio::runtime::{Handle, RuntimeFlavor};

/// Runs `f` where blocking is allowed; `Err` only if it panicked on the blocking pool.
pub async fn run_blocking<T, F>(f: F) -> Result<T, tokio::task::JoinError>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    match Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(RuntimeFlavor::MultiThread) => tokio::task::spawn_blocking(f).await,
        _ => Ok(f()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "current_thread")]
    async fn inline_on_a_current_thread_runtime() {
        let here = std::thread::current().id();
        let ran_on = run_blocking(move || std::thread::current().id())
            .await
            .expect("ran");
        assert_eq!(ran_on, here);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn on_the_blocking_pool_of_a_multi_thread_runtime() {
        let name = run_blocking(|| std::thread::current().name().map(str::to_owned))
            .await
            .expect("ran");
        assert_ne!(name.as_deref(), Some("tokio-runtime-worker"));
    }
}
