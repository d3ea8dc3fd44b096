//! The bounded PostgreSQL connection pool the application server draws from.
//!
//! The pool size is the application tier's concurrency towards the database:
//! like Tomcat's thread pool in the paper's setup, it should be large enough
//! that the database, not the pool, is the bottleneck — otherwise the pool
//! itself acts as a crude admission control and hides the thrashing the
//! Gatekeeper experiment is about. Requests waiting for a connection wait at
//! most `wait`; past that they are answered 503.

use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};

use crate::error::{Error, Result};

/// Builds a pool of at most `size` connections to `url`. Connections are
/// opened lazily; the first query reveals a wrong URL.
pub fn pool(url: &str, size: usize, wait: Duration) -> Result<Pool> {
    if size == 0 {
        return Err(Error::Config("--pool must be at least 1".into()));
    }
    let config: tokio_postgres::Config = url.parse().map_err(|e| Error::Config(format!("--db '{url}': {e}")))?;
    let manager = Manager::from_config(
        config,
        tokio_postgres::NoTls,
        // Fast recycling: a returned connection is reused without a probe
        // query; a broken one fails its next query and is dropped.
        ManagerConfig { recycling_method: RecyclingMethod::Fast },
    );
    Pool::builder(manager)
        .max_size(size)
        .wait_timeout(Some(wait))
        .create_timeout(Some(Duration::from_secs(10)))
        .runtime(Runtime::Tokio1)
        .build()
        .map_err(|e| Error::Config(format!("connection pool: {e}")))
}

/// Takes a connection from the pool, mapping a pool timeout to 503 and a
/// failed connection attempt to a database error.
pub async fn get(pool: &Pool) -> Result<deadpool_postgres::Object> {
    use deadpool_postgres::PoolError;
    match pool.get().await {
        Ok(c) => Ok(c),
        Err(PoolError::Backend(e)) => Err(Error::db("connect")(e)),
        Err(e) => Err(Error::Pool(e.to_string())),
    }
}
