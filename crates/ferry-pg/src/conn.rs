//! Connecting the way libpq does: a conninfo string or URL, with `PGHOST`, `PGPORT`,
//! `PGUSER`, `PGDATABASE` and `PGPASSWORD` filling in what it leaves out.

use ferry_store::{Error, Result};
use tokio_postgres::{Client, Config, NoTls};

/// The configuration `conninfo` (may be empty) and the environment give.
pub fn config(conninfo: &str) -> Result<Config> {
    let mut c: Config = if conninfo.trim().is_empty() {
        Config::new()
    } else {
        conninfo
            .parse()
            .map_err(|e| Error::Invalid(format!("bad connection string '{conninfo}': {e}")))?
    };
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    if c.get_hosts().is_empty() {
        let host = env("PGHOST").unwrap_or_else(|| "/var/run/postgresql".into());
        for h in host.split(',') {
            c.host(h);
        }
    }
    if c.get_ports().is_empty() {
        let port = env("PGPORT").unwrap_or_else(|| "5432".into());
        let port = port
            .parse()
            .map_err(|_| Error::Invalid(format!("PGPORT '{port}' is not a port")))?;
        c.port(port);
    }
    if c.get_user().is_none() {
        let user = env("PGUSER")
            .or_else(|| env("USER"))
            .unwrap_or_else(|| "postgres".into());
        c.user(&user);
    }
    if c.get_dbname().is_none() {
        let db = env("PGDATABASE").unwrap_or_else(|| c.get_user().unwrap_or("postgres").into());
        c.dbname(&db);
    }
    if c.get_password().is_none() {
        if let Some(pw) = env("PGPASSWORD") {
            c.password(pw);
        }
    }
    c.application_name("ferry");
    Ok(c)
}

/// A connected client; the connection runs on its own task.
pub async fn connect(conninfo: &str) -> Result<Client> {
    let cfg = config(conninfo)?;
    let (client, conn) = cfg.connect(NoTls).await.map_err(|e| {
        Error::Invalid(format!(
            "cannot connect to PostgreSQL ({}): {}",
            describe(&cfg),
            pg_message(&e)
        ))
    })?;
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!("connection closed: {e}");
        }
    });
    Ok(client)
}

fn describe(c: &Config) -> String {
    let host = match c.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(h)) => h.clone(),
        Some(tokio_postgres::config::Host::Unix(p)) => p.display().to_string(),
        None => "?".into(),
    };
    format!(
        "host {host} port {} user {}",
        c.get_ports().first().copied().unwrap_or(5432),
        c.get_user().unwrap_or("?")
    )
}

/// The server's message for `e` when it sent one, else the error itself.
pub fn pg_message(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => db.message().to_string(),
        None => {
            let mut s = e.to_string();
            let mut src = std::error::Error::source(e);
            while let Some(inner) = src {
                s = format!("{s}: {inner}");
                src = inner.source();
            }
            s
        }
    }
}
