//! The HTTP client under both clouds, with every body metered into the attempt's
//! [`Flow`](crate::flow::Flow), so that the engine can tell a slow request from a stalled one.
//!
//! hyper-util's pooled client over hyper-rustls, the parts reqwest is made of, assembled here
//! for two things reqwest does not allow:
//! - the socket gets `TCP_NOTSENT_LOWAT`, so that the kernel holds at most [`UNSENT`] bytes
//!   not yet on the wire: a body is then handed over as fast as the link takes it, and the
//!   flow counted here is the link's, not a burst into a 4 MiB send buffer followed by seconds
//!   of silence;
//! - a request body goes out in slices of [`SLICE`], each counted when hyper asks for it.
//!
//! Proxies from the environment (`HTTPS_PROXY`) are not used.

use std::future::Future;
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use http::Uri;
use http_body::{Body, Frame, SizeHint};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use object_store::client::{
    HttpClient, HttpConnector as ConnectorFactory, HttpError, HttpErrorKind, HttpRequest,
    HttpRequestBody, HttpResponse, HttpResponseBody, HttpService,
};
use object_store::ClientOptions;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use tokio::net::TcpStream;

use super::trust::{Bundle, Trust};
use crate::error::one_line;
use crate::flow::{self, Flow};
use crate::{Error, Result};

/// Body bytes handed to hyper at a time.
const SLICE: usize = 64 << 10;
/// Bytes a socket may hold that are not yet sent.
const UNSENT: libc::c_int = 256 << 10;
/// Longest a TCP connection set-up may take (TLS is watched as a stall).
pub(super) const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Idle pooled connections are closed after this (S3 closes them at about a minute).
const POOL_IDLE: Duration = Duration::from_secs(50);

type Pool = Client<HttpsConnector<Tcp>, Sending>;

/// Builds [`Metered`] clients; `object_store` asks it for one per store.
#[derive(Debug, Clone)]
pub(crate) struct Connector {
    pool: Pool,
}

impl Connector {
    /// A client trusting the system's roots plus those of `ca_pem`, a PEM bundle named `name`.
    pub(super) fn new(ca_pem: Option<(&str, &[u8])>) -> Result<Self> {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let bundle = match ca_pem {
            None => None,
            Some((name, pem)) => Some(Bundle {
                name: name.to_string(),
                certs: CertificateDer::pem_slice_iter(pem)
                    .collect::<std::result::Result<Vec<_>, _>>()
                    .map_err(|e| Error::Invalid(format!("CA bundle {name}: {e}")))?,
            }),
        };
        if let Some(b) = bundle.as_ref().filter(|b| b.certs.is_empty()) {
            return Err(Error::Invalid(format!(
                "CA bundle {}: no PEM certificate in it",
                b.name
            )));
        }
        let extra = bundle.as_ref().map(|b| b.certs.clone()).unwrap_or_default();
        let tls_err = |e: rustls::Error| Error::Invalid(format!("TLS set-up: {}", one_line(&e)));
        let chain =
            rustls_platform_verifier::Verifier::new_with_extra_roots(extra, provider.clone())
                .map_err(tls_err)?;
        let verifier = Trust::new(Arc::new(chain), bundle, provider.clone());
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(tls_err)?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(verifier))
            .with_no_client_auth();
        let mut tcp = HttpConnector::new();
        tcp.enforce_http(false);
        tcp.set_nodelay(true);
        tcp.set_connect_timeout(Some(CONNECT_TIMEOUT));
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(Tcp(tcp));
        // HTTP/1 only: one request per connection, as the engine counts them; HTTP/2 would
        // carry every block in one TCP window and hide per-connection limits from the tuner.
        let pool = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(POOL_IDLE)
            .build(https);
        Ok(Self { pool })
    }

    /// A client for requests ferry signs itself.
    pub(crate) fn http(&self) -> HttpClient {
        HttpClient::new(Metered(self.pool.clone()))
    }
}

impl ConnectorFactory for Connector {
    fn connect(&self, _: &ClientOptions) -> object_store::Result<HttpClient> {
        Ok(self.http())
    }
}

/// hyper-util's TCP connector, each new socket limited to [`UNSENT`] unsent bytes.
#[derive(Debug, Clone)]
struct Tcp(HttpConnector);

impl tower_service::Service<Uri> for Tcp {
    type Response = TokioIo<TcpStream>;
    type Error = Box<dyn std::error::Error + Send + Sync>;
    type Future =
        Pin<Box<dyn Future<Output = std::result::Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<std::result::Result<(), Self::Error>> {
        self.0.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let connecting = self.0.call(uri);
        Box::pin(async move {
            let io = connecting.await?;
            let fd = io.inner().as_raw_fd();
            // SAFETY: a valid socket, an int option of the right size. A kernel without the
            // option refuses it, and the socket works as before.
            unsafe {
                libc::setsockopt(
                    fd,
                    libc::IPPROTO_TCP,
                    libc::TCP_NOTSENT_LOWAT,
                    (&UNSENT as *const libc::c_int).cast(),
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                );
            }
            Ok(io)
        })
    }
}

#[derive(Debug)]
struct Metered(Pool);

fn http_error(e: hyper_util::client::legacy::Error) -> HttpError {
    if let Some(r) = super::trust::refused(&e) {
        return HttpError::new(HttpErrorKind::Connect, r);
    }
    let kind = if e.is_connect() {
        HttpErrorKind::Connect
    } else {
        HttpErrorKind::Request
    };
    HttpError::new(kind, e)
}

#[async_trait]
impl HttpService for Metered {
    async fn call(&self, req: HttpRequest) -> std::result::Result<HttpResponse, HttpError> {
        let flow = flow::current();
        if let Some(f) = &flow {
            f.started();
        }
        let (parts, body) = req.into_parts();
        let total = body.content_length() as u64;
        let body = Sending {
            inner: body,
            slice: Bytes::new(),
            total,
            flow: flow.clone(),
        };
        let res = self
            .0
            .request(http::Request::from_parts(parts, body))
            .await
            .map_err(http_error)?;
        if let Some(f) = &flow {
            f.answered();
        }
        let (parts, body) = res.into_parts();
        let body = HttpResponseBody::new(Receiving { inner: body, flow });
        Ok(HttpResponse::from_parts(parts, body))
    }
}

/// What a counted body's `poll_frame` answers.
type Polled = Poll<Option<std::result::Result<Frame<Bytes>, HttpError>>>;

/// A request body handed over [`SLICE`] bytes at a time, each counted.
struct Sending {
    inner: HttpRequestBody,
    slice: Bytes,
    total: u64,
    flow: Option<Arc<Flow>>,
}

impl Body for Sending {
    type Data = Bytes;
    type Error = HttpError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Polled {
        let this = &mut *self;
        while this.slice.is_empty() {
            match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Ready(Some(Ok(f))) => match f.into_data() {
                    Ok(d) => this.slice = d,
                    Err(f) => return Poll::Ready(Some(Ok(f))),
                },
                other => return other,
            }
        }
        let n = this.slice.len().min(SLICE);
        let out = this.slice.split_to(n);
        if let Some(f) = &this.flow {
            f.moved(n as u64);
            if this.slice.is_empty() && this.inner.is_end_stream() {
                f.body_sent(this.total);
            }
        }
        Poll::Ready(Some(Ok(Frame::data(out))))
    }

    fn is_end_stream(&self) -> bool {
        self.slice.is_empty() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let inner = self.inner.size_hint();
        let extra = self.slice.len() as u64;
        let mut h = SizeHint::new();
        h.set_lower(inner.lower() + extra);
        if let Some(u) = inner.upper() {
            h.set_upper(u + extra);
        }
        h
    }
}

/// A response body, each chunk counted as it is read.
struct Receiving {
    inner: hyper::body::Incoming,
    flow: Option<Arc<Flow>>,
}

impl Body for Receiving {
    type Data = Bytes;
    type Error = HttpError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Polled {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let (Some(flow), Poll::Ready(Some(Ok(f)))) = (&self.flow, &polled) {
            flow.moved(f.data_ref().map_or(0, |d| d.len() as u64));
        }
        polled.map_err(|e| HttpError::new(HttpErrorKind::Request, e))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
