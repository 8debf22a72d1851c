//! Faults between ferry and a real server, through Toxiproxy's HTTP API.

use serde_json::{json, Value};

/// A Toxiproxy server (`TOXIPROXY_URL`).
#[derive(Debug, Clone)]
pub struct Toxiproxy {
    url: String,
}

/// One proxy: ferry talks to `listen`, Toxiproxy forwards to the real server.
#[derive(Debug)]
pub struct Proxy {
    api: String,
    /// `127.0.0.1:PORT` the proxy listens on.
    pub listen: String,
}

fn call(method: &str, url: &str, body: Option<Value>) -> Value {
    let resp = match (method, body) {
        ("POST", Some(b)) => ureq::post(url).send_json(b),
        ("POST", None) => ureq::post(url).send_empty(),
        ("DELETE", _) => ureq::delete(url).call(),
        _ => ureq::get(url).call(),
    };
    match resp {
        Ok(mut r) => r.body_mut().read_json().unwrap_or(Value::Null),
        Err(e) => panic!("toxiproxy {method} {url}: {e}"),
    }
}

impl Toxiproxy {
    /// The server from `TOXIPROXY_URL`, if up (see [`crate::require`]).
    pub fn from_env() -> Option<Self> {
        crate::require("TOXIPROXY_URL").map(|url| Self {
            url: url.trim_end_matches('/').into(),
        })
    }

    /// A new proxy with a fresh name and port in front of `upstream` (`host:port`).
    pub fn proxy(&self, upstream: &str) -> Proxy {
        let name = crate::unique("p");
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("free port");
        let listen = listener.local_addr().expect("addr").to_string();
        drop(listener);
        call(
            "POST",
            &format!("{}/proxies", self.url),
            Some(json!({"name": name, "listen": listen, "upstream": upstream, "enabled": true})),
        );
        Proxy {
            api: format!("{}/proxies/{name}", self.url),
            listen,
        }
    }
}

/// A proxy in front of `endpoint` (`http://HOST:PORT`), once Toxiproxy is up.
fn in_front_of(endpoint: Option<&String>) -> Option<Proxy> {
    let toxi = Toxiproxy::from_env()?;
    Some(toxi.proxy(endpoint?.trim_start_matches("http://")))
}

/// A fresh S3 bucket on the server under test and a proxy in front of that server; `None`
/// (a loud skip) when MinIO or Toxiproxy is down outside CI.
pub async fn s3_behind_proxy() -> Option<(ferry_store::cloud::S3Config, String, Proxy)> {
    let cfg = crate::s3()?;
    let proxy = in_front_of(cfg.endpoint.as_ref())?;
    let (_, bucket) = crate::s3_bucket(&cfg).await;
    Some((cfg, bucket, proxy))
}

/// A fresh GCS bucket on the emulator under test and a proxy in front of it.
pub async fn gcs_behind_proxy() -> Option<(ferry_store::cloud::GcsConfig, String, Proxy)> {
    let cfg = crate::gcs()?;
    let proxy = in_front_of(cfg.endpoint.as_ref())?;
    let (_, bucket) = crate::gcs_bucket(&cfg).await;
    Some((cfg, bucket, proxy))
}

impl Proxy {
    /// Adds a toxic (`latency`, `bandwidth`, `timeout`, `reset_peer`, `limit_data`, ...) on
    /// `stream` (`upstream` = towards the server, `downstream` = towards ferry) to a `toxicity`
    /// share of connections; returns its name.
    pub fn toxic(&self, kind: &str, stream: &str, toxicity: f64, attributes: Value) -> String {
        let name = crate::unique(kind);
        call(
            "POST",
            &format!("{}/toxics", self.api),
            Some(
                json!({"name": name, "type": kind, "stream": stream, "toxicity": toxicity, "attributes": attributes}),
            ),
        );
        name
    }

    /// Removes one toxic.
    pub fn remove(&self, toxic: &str) {
        call("DELETE", &format!("{}/toxics/{toxic}", self.api), None);
    }

    /// Cuts (false) or restores (true) the link; cutting closes open connections.
    pub fn enable(&self, on: bool) {
        call("POST", &self.api, Some(json!({"enabled": on})));
    }

    /// `http://LISTEN`, for an endpoint URL.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.listen)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = ureq::delete(&self.api).call();
    }
}
