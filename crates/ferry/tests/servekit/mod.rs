//! A `ferry serve` started for one test: its own certificate, store directory and tenants,
//! killed when dropped; and raw HTTPS requests to it, malformed ones included.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;

use crate::common::{s, temp_dir};

/// A tenant of the test server: name, token, role, quota.
pub struct Tenant {
    pub name: &'static str,
    pub token: String,
    pub role: &'static str,
    pub quota: Option<&'static str>,
}

/// A running `ferry serve`.
pub struct Served {
    child: Child,
    pub dir: PathBuf,
    pub store: PathBuf,
    pub cert: PathBuf,
    /// The CA that signed `cert`: what clients trust.
    pub ca: PathBuf,
    pub port: u16,
    pub tenants: Vec<Tenant>,
    log: PathBuf,
}

fn token(name: &str) -> String {
    // Per-test random tokens: a fixed one could pass by accident.
    format!("{name}-{}", ferry_testkit::unique("t"))
}

fn sha256_hex(t: &str) -> String {
    use sha2::Digest;
    hex(&sha2::Sha256::digest(t.as_bytes()))
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

impl Served {
    /// alice (admin), bob (append-only), carol (read), dave (admin, 64 KiB quota); `limits`
    /// is the `[serve.limits]` table's body.
    pub fn start(limits: &str) -> Served {
        Self::start_opts(limits, false)
    }

    /// [`Served::start`]; with `client_certs`, also a client CA trusted by the server, and
    /// tenant erin (admin) authenticated by the certificate `CN=erin-host` it signed
    /// (`dir/erin.crt`, `dir/erin.key`); `dir/mallory.*` is one for the same subject signed
    /// by another CA.
    pub fn start_opts(limits: &str, client_certs: bool) -> Served {
        Self::start_with(limits, client_certs, None)
    }

    /// [`Served::start`] over `backend`, a store's URL (`s3://BUCKET`: its credentials and
    /// endpoint from the environment, as `scripts/services` exports them), not a directory.
    pub fn start_over(limits: &str, backend: &str) -> Served {
        Self::start_with(limits, false, Some(backend))
    }

    fn start_with(limits: &str, client_certs: bool, backend: Option<&str>) -> Served {
        let dir = temp_dir();
        // A CA and a server certificate it signs, as a deployment has: rustls refuses a
        // self-signed CA certificate as the server's own.
        let server_ext = "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n";
        ca_and_cert(&dir, "ca", "server", "/CN=127.0.0.1", server_ext);
        let (cert, key, ca) = (
            dir.join("server.crt"),
            dir.join("server.key"),
            dir.join("ca.pem"),
        );
        let mut extra = String::new();
        if client_certs {
            let client_ext = "basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n";
            ca_and_cert(&dir, "client-ca", "erin", "/CN=erin-host", client_ext);
            ca_and_cert(&dir, "other-ca", "mallory", "/CN=erin-host", client_ext);
            extra = format!("client_ca = \"{}\"\n", s(&dir.join("client-ca.pem")));
        }
        let tenants = vec![
            Tenant {
                name: "alice",
                token: token("alice"),
                role: "admin",
                quota: None,
            },
            Tenant {
                name: "bob",
                token: token("bob"),
                role: "append-only",
                quota: None,
            },
            Tenant {
                name: "carol",
                token: token("carol"),
                role: "read",
                quota: None,
            },
            Tenant {
                name: "dave",
                token: token("dave"),
                role: "admin",
                quota: Some("64KiB"),
            },
        ];
        let store = dir.join("store");
        let mut toml = format!(
            "[serve]\nlisten = \"127.0.0.1:0\"\nbackend = \"{}\"\ntls_cert = \"{}\"\ntls_key = \"{}\"\n{extra}[serve.limits]\n{limits}\n",
            backend.unwrap_or(s(&store)),
            s(&cert),
            s(&key)
        );
        for t in &tenants {
            toml += &format!(
                "[[serve.tenant]]\nname = \"{}\"\ntoken_sha256 = \"{}\"\nrole = \"{}\"\n",
                t.name,
                sha256_hex(&t.token),
                t.role
            );
            if let Some(q) = t.quota {
                toml += &format!("quota = \"{q}\"\n");
            }
        }
        if client_certs {
            toml += &format!(
                "[[serve.tenant]]\nname = \"erin\"\ntoken_sha256 = \"{}\"\nrole = \"admin\"\nclient_cert_subject = \"CN=erin-host\"\n",
                sha256_hex(&token("erin"))
            );
        }
        let config = dir.join("ferry.toml");
        std::fs::write(&config, toml).unwrap();
        let log = dir.join("serve.log");
        let (child, port) = spawn(&dir, &log);
        Served {
            child,
            dir,
            store,
            cert,
            ca,
            port,
            tenants,
            log,
        }
    }

    /// The tenant named `name`.
    pub fn tenant(&self, name: &str) -> &Tenant {
        self.tenants
            .iter()
            .find(|t| t.name == name)
            .expect("a test tenant")
    }

    /// restic's repository URL for `tenant`'s repository `repo`.
    pub fn restic_url(&self, tenant: &str, repo: &str) -> String {
        let t = self.tenant(tenant);
        format!(
            "rest:https://{}:{}@127.0.0.1:{}/{}/{repo}/",
            t.name, t.token, self.port, t.name
        )
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Every file under the store with its bytes: to show a refused request changed nothing.
    pub fn snapshot(&self) -> Vec<(PathBuf, Vec<u8>)> {
        let mut out = Vec::new();
        walk(&self.store, &mut out);
        out.sort();
        out
    }

    /// Sends `head` (CRLFs added) and `body` over TLS, then closes the writing side after
    /// `body` when `cut`; returns the status and the response body.
    pub fn raw(&self, head: &str, body: &[u8], cut: bool) -> (u16, Vec<u8>) {
        self.raw_via(&format!("127.0.0.1:{}", self.port), head, body, cut)
    }

    /// [`Served::raw`] with the answer's header lines.
    pub fn raw_headers(&self, head: &str) -> (u16, String, Vec<u8>) {
        let mut tls = self.connect(&format!("127.0.0.1:{}", self.port), None);
        let _ = tls.write_all(head.replace('\n', "\r\n").as_bytes());
        let _ = tls.flush();
        read_response_whole(&mut tls)
    }

    /// [`Served::raw`] through `addr` (a proxy in front of the server).
    pub fn raw_via(&self, addr: &str, head: &str, body: &[u8], cut: bool) -> (u16, Vec<u8>) {
        self.raw_as(addr, None, head, body, cut)
    }

    /// [`Served::raw`], presenting the client certificate `dir/NAME.crt` (key `NAME.key`).
    pub fn raw_cert(&self, name: &str, head: &str) -> (u16, Vec<u8>) {
        self.raw_as(
            &format!("127.0.0.1:{}", self.port),
            Some(name),
            head,
            b"",
            false,
        )
    }

    fn raw_as(
        &self, addr: &str, cert: Option<&str>, head: &str, body: &[u8], cut: bool,
    ) -> (u16, Vec<u8>) {
        let mut tls = self.connect(addr, cert);
        let head = head.replace('\n', "\r\n");
        let _ = tls.write_all(head.as_bytes());
        let _ = tls.write_all(body);
        let _ = tls.flush();
        if cut {
            tls.conn.send_close_notify();
            let _ = tls.flush();
            let _ = tls.sock.shutdown(std::net::Shutdown::Write);
        }
        read_response(&mut tls)
    }

    /// A TLS connection to the server, for a test that writes a request in parts.
    pub fn stream(&self) -> rustls::StreamOwned<rustls::ClientConnection, TcpStream> {
        self.connect(&format!("127.0.0.1:{}", self.port), None)
    }

    /// A well-formed request by `tenant` (None: no credentials) with a bearer token.
    pub fn request(
        &self, method: &str, path: &str, tenant: Option<&str>, body: &[u8],
    ) -> (u16, Vec<u8>) {
        let auth = tenant.map_or(String::new(), |t| {
            format!("Authorization: Bearer {}\n", self.tenant(t).token)
        });
        let head = format!(
            "{method} {path} HTTP/1.1\nHost: 127.0.0.1\n{auth}Content-Length: {}\nConnection: close\n\n",
            body.len()
        );
        self.raw(&head, body, false)
    }

    /// The head of a request by `tenant` for `body`, the connection closed after it.
    pub fn head(&self, method: &str, path: &str, tenant: &str, len: usize) -> String {
        format!(
            "{method} {path} HTTP/1.1\nHost: 127.0.0.1\nAuthorization: Bearer {}\nContent-Length: {len}\nConnection: close\n\n",
            self.tenant(tenant).token
        )
    }

    fn connect(
        &self, addr: &str, cert: Option<&str>,
    ) -> rustls::StreamOwned<rustls::ClientConnection, TcpStream> {
        let cert = cert.map(|n| {
            (
                self.dir.join(format!("{n}.crt")),
                self.dir.join(format!("{n}.key")),
            )
        });
        tls_to(addr, &self.ca, cert, None).expect("a TLS connection to the server")
    }
}

/// A TCP connection to `to` from the address `ip` (any of 127.0.0.0/8 is this host's):
/// another client, as the server sees it.
pub fn connect_from(ip: std::net::Ipv4Addr, to: std::net::SocketAddr) -> Option<TcpStream> {
    use std::os::fd::FromRawFd;
    let std::net::SocketAddr::V4(to) = to else {
        return None;
    };
    let sin = |a: std::net::SocketAddrV4| libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: a.port().to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(*a.ip()).to_be(),
        },
        sin_zero: [0; 8],
    };
    let (local, remote) = (sin(std::net::SocketAddrV4::new(ip, 0)), sin(to));
    let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: a new socket, owned by the TcpStream made of it (closed on any failure), and
    // two sockaddr_in of their size.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return None;
        }
        let sock = TcpStream::from_raw_fd(fd);
        let ok = libc::bind(fd, (&local as *const libc::sockaddr_in).cast(), len) == 0
            && libc::connect(fd, (&remote as *const libc::sockaddr_in).cast(), len) == 0;
        ok.then_some(sock)
    }
}

/// `GET /healthz` from the address `ip`: the status, or `None` when the server closed the
/// connection or could not be reached.
pub fn healthz_from(port: u16, ca: &Path, ip: std::net::Ipv4Addr) -> Option<u16> {
    let mut tls = tls_to(&format!("127.0.0.1:{port}"), ca, None, Some(ip))?;
    let head = "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    tls.write_all(head.as_bytes()).ok()?;
    let (code, _) = read_response(&mut tls);
    (code != 0).then_some(code)
}

/// A TLS connection to `addr` (the server's certificate names 127.0.0.1) trusting `ca`, with
/// a client certificate and key when given; `None` when it cannot be made.
fn tls_to(
    addr: &str, ca: &Path, cert: Option<(PathBuf, PathBuf)>, from: Option<std::net::Ipv4Addr>,
) -> Option<rustls::StreamOwned<rustls::ClientConnection, TcpStream>> {
    use rustls_pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls_pki_types::CertificateDer::pem_file_iter(ca).ok()? {
        roots.add(c.ok()?).ok()?;
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .ok()?
        .with_root_certificates(roots);
    let cfg = match cert {
        None => builder.with_no_client_auth(),
        Some((crt, key)) => {
            let certs = rustls_pki_types::CertificateDer::pem_file_iter(crt)
                .ok()?
                .collect::<Result<Vec<_>, _>>()
                .ok()?;
            let key = rustls_pki_types::PrivateKeyDer::from_pem_file(key).ok()?;
            builder.with_client_auth_cert(certs, key).ok()?
        }
    };
    let name = rustls_pki_types::ServerName::try_from("127.0.0.1").ok()?;
    let conn = rustls::ClientConnection::new(Arc::new(cfg), name).ok()?;
    let sock = match from {
        None => TcpStream::connect(addr).ok()?,
        Some(ip) => connect_from(ip, addr.parse().ok()?)?,
    };
    sock.set_read_timeout(Some(std::time::Duration::from_secs(60)))
        .ok()?;
    Some(rustls::StreamOwned::new(conn, sock))
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A new CA `NAME.pem` (key `NAME.key`) in `dir`, and a certificate for `subject` that it
/// signs, `WHO.crt` (key `WHO.key`), with the extensions `ext`.
fn ca_and_cert(dir: &Path, name: &str, who: &str, subject: &str, ext: &str) {
    let p = |f: String| s(&dir.join(f)).to_string();
    let (ca, ca_key, ext_file) = (
        p(format!("{name}.pem")),
        p(format!("{name}.key")),
        p(format!("{who}.cnf")),
    );
    let (crt, key, csr) = (
        p(format!("{who}.crt")),
        p(format!("{who}.key")),
        p(format!("{who}.csr")),
    );
    std::fs::write(&ext_file, ext).unwrap();
    let ca_subject = format!("/CN={name}");
    let new = ["req", "-newkey", "rsa:2048", "-nodes", "-days", "2"];
    let steps: [Vec<&str>; 3] = [
        [
            &new[..],
            &[
                "-x509",
                "-subj",
                &ca_subject,
                "-keyout",
                &ca_key,
                "-out",
                &ca,
            ],
        ]
        .concat(),
        [&new[..], &["-subj", subject, "-keyout", &key, "-out", &csr]].concat(),
        vec![
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            &ca,
            "-CAkey",
            &ca_key,
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            &ext_file,
            "-out",
            &crt,
        ],
    ];
    for args in steps {
        let ok = Command::new("openssl")
            .args(&args)
            .stderr(Stdio::null())
            .status()
            .expect("openssl");
        assert!(ok.success(), "openssl {args:?} failed");
    }
}

/// Starts `ferry serve` with `dir`'s config, logging to `log` (appended); waits for its port.
fn spawn(dir: &Path, log: &Path) -> (Child, u16) {
    let before = std::fs::read_to_string(log).unwrap_or_default().len();
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ferry"));
    // If the test process dies (a panic in a thread holding the server, a kill), the server
    // goes with it instead of lingering.
    // SAFETY: prctl is async-signal-safe and touches only this child's own settings.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    let child = cmd
        .args(["--config", s(&dir.join("ferry.toml")), "serve"])
        .env("FERRY_CACHE_DIR", dir.join("cache"))
        .stdout(Stdio::null())
        .stderr(out)
        .spawn()
        .expect("start ferry serve");
    (child, wait_for_port(log, before))
}

impl Served {
    /// `kill -9`, then the same server started again on the same store.
    pub fn kill9_and_restart(&mut self) {
        self.child.kill().unwrap(); // SIGKILL
        self.child.wait().unwrap();
        let (child, port) = spawn(&self.dir, &self.log);
        (self.child, self.port) = (child, port);
    }
}

fn wait_for_port(log: &Path, after: usize) -> u16 {
    for _ in 0..200 {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if let Some(rest) = text
            .get(after..)
            .and_then(|t| t.split("listening on https://127.0.0.1:").nth(1))
        {
            let port: String = rest.chars().take_while(char::is_ascii_digit).collect();
            return port.parse().expect("a port");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    panic!(
        "ferry serve did not start: {}",
        std::fs::read_to_string(log).unwrap_or_default()
    );
}

fn walk(d: &Path, out: &mut Vec<(PathBuf, Vec<u8>)>) {
    let Ok(rd) = std::fs::read_dir(d) else { return };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            walk(&p, out);
        } else {
            out.push((p.clone(), std::fs::read(&p).unwrap_or_default()));
        }
    }
}

/// The status and body of the answer on `r`, read to its end.
pub fn response(r: &mut impl Read) -> (u16, Vec<u8>) {
    read_response(r)
}

fn read_response(r: &mut impl Read) -> (u16, Vec<u8>) {
    let (code, _, body) = read_response_whole(r);
    (code, body)
}

/// The status, the header lines and the body of an answer.
fn read_response_whole(r: &mut impl Read) -> (u16, String, Vec<u8>) {
    let mut all = Vec::new();
    if let Err(e) = r.read_to_end(&mut all) {
        eprintln!("read: {e} after {} bytes", all.len());
    }
    let mut rd = BufReader::new(&all[..]);
    let mut status = String::new();
    rd.read_line(&mut status).unwrap();
    let code = status
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let text = &all[..];
    let (head, body) = match text.windows(4).position(|w| w == b"\r\n\r\n") {
        Some(i) => (&text[..i], text[i + 4..].to_vec()),
        None => (text, Vec::new()),
    };
    (code, String::from_utf8_lossy(head).into_owned(), body)
}

/// A PUT of `body` to `path` on the server at `port`, trusting `ca`; the status, or `None`
/// when the server could not be reached or the connection broke.
pub fn put(port: u16, ca: &Path, token: &str, path: &str, body: &[u8]) -> Option<u16> {
    let head = format!(
        "PUT {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    send(port, ca, &head, body)
}

/// Sends `head` (CRLF line ends) and `body` to the server at `port`, trusting `ca`, and
/// reads the answer; its status, or `None` when there was none.
pub fn send(port: u16, ca: &Path, head: &str, body: &[u8]) -> Option<u16> {
    let head = head.replace("\r\n", "\n").replace('\n', "\r\n");
    let mut tls = tls_to(&format!("127.0.0.1:{port}"), ca, None, None)?;
    tls.write_all(head.as_bytes()).ok()?;
    tls.write_all(body).ok()?;
    let (code, _) = read_response(&mut tls);
    (code != 0).then_some(code)
}
