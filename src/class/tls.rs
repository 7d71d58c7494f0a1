//! `tinygpt class --tls CERT KEY`: the class over https and wss.
//!
//! Browsers give WebGPU and service workers only to secure pages (https, or
//! localhost), so a class served over plain http on a school's network
//! trains on the students' CPUs. With a certificate the same server speaks
//! TLS (rustls, its `ring` provider) and the pages get their GPUs.
//!
//! [`TlsListener`] is an axum listener: a task accepts TCP connections and
//! runs each handshake on its own task, bounded in time and in number, so a
//! page that opens a connection and says nothing holds up no one else.

use axum::serve::Listener;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use std::io::Read;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls;
use tokio_rustls::server::TlsStream;

/// How long a connection has to finish its handshake.
const HANDSHAKE_WITHIN: Duration = Duration::from_secs(10);
/// Handshakes in flight at once; further connections wait to be accepted.
const HANDSHAKES_AT_ONCE: usize = 256;
/// A certificate or key file larger than this is not one.
const PEM_AT_MOST: u64 = 1 << 20;

/// How to make a certificate, said wherever one is missing or unreadable.
pub const MAKE_ONE: &str = "make one with `openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 365 -subj /CN=tinygpt-class -addext subjectAltName=IP:192.168.1.20 -keyout class-key.pem -out class-cert.pem` (your laptop's address in subjectAltName), see docs/guide/class.md";

/// A PEM file's bytes, at most [`PEM_AT_MOST`].
fn read_pem(path: &Path, what: &str) -> Result<Vec<u8>, String> {
    // A FIFO or a device would block the open or never end: only a file.
    if std::fs::metadata(path).is_ok_and(|m| !m.is_file()) {
        return Err(format!("the --tls {what} {} is not a file; {MAKE_ONE}", path.display()));
    }
    let file = std::fs::File::open(path)
        .map_err(|e| format!("cannot read the --tls {what} {}: {e}; {MAKE_ONE}", path.display()))?;
    let mut bytes = Vec::new();
    file.take(PEM_AT_MOST + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read the --tls {what} {}: {e}", path.display()))?;
    if bytes.len() as u64 > PEM_AT_MOST {
        return Err(format!(
            "the --tls {what} {} is over {} KiB: give the PEM file of the certificate and of its key",
            path.display(),
            PEM_AT_MOST >> 10
        ));
    }
    Ok(bytes)
}

/// The server's TLS configuration from a PEM certificate chain and its
/// private key (PKCS#8, PKCS#1 or SEC1).
pub fn server_config(cert: &Path, key: &Path) -> Result<Arc<rustls::ServerConfig>, String> {
    let cert_pem = read_pem(cert, "certificate")?;
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{} is not a PEM certificate ({e}); {MAKE_ONE}", cert.display()))?;
    if chain.is_empty() {
        return Err(format!(
            "{} holds no certificate (no -----BEGIN CERTIFICATE-----): give the certificate first, then the key; {MAKE_ONE}",
            cert.display()
        ));
    }
    let key_pem = read_pem(key, "key")?;
    let private_key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| {
        format!(
            "{} holds no private key ({e}): give the certificate first, then its key; {MAKE_ONE}",
            key.display()
        )
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("cannot set up TLS: {e}"))?
        .with_no_client_auth()
        .with_single_cert(chain, private_key)
        .map_err(|e| {
            format!(
                "{} and {} do not make a certificate and its key ({e}); {MAKE_ONE}",
                cert.display(),
                key.display()
            )
        })?;
    // The server speaks HTTP/1.1 only (WebSockets upgrade from it).
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Accepts TCP connections and hands axum the ones whose handshake ends.
pub struct TlsListener {
    local: SocketAddr,
    done: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    accepting: tokio::task::JoinHandle<()>,
}

impl TlsListener {
    /// Starts accepting on `listener`; must be called inside the runtime.
    pub fn new(mut listener: TcpListener, config: Arc<rustls::ServerConfig>) -> std::io::Result<Self> {
        let local = listener.local_addr()?;
        let acceptor = TlsAcceptor::from(config);
        let (send, done) = mpsc::channel(64);
        let slots = Arc::new(Semaphore::new(HANDSHAKES_AT_ONCE));
        let accepting = tokio::spawn(async move {
            loop {
                let Ok(slot) = slots.clone().acquire_owned().await else { return };
                // axum's accept: retries (with a pause) on errors such as
                // too many open files.
                let (tcp, peer) = Listener::accept(&mut listener).await;
                let _ = tcp.set_nodelay(true);
                let acceptor = acceptor.clone();
                let send = send.clone();
                tokio::spawn(async move {
                    let _slot = slot;
                    match tokio::time::timeout(HANDSHAKE_WITHIN, acceptor.accept(tcp)).await {
                        Ok(Ok(tls)) => {
                            let _ = send.send((tls, peer)).await;
                        }
                        // A browser that has not yet accepted a
                        // self-signed certificate closes the handshake:
                        // common, and not worth a line each time.
                        Ok(Err(_)) | Err(_) => {}
                    }
                });
            }
        });
        Ok(Self { local, done, accepting })
    }
}

impl Drop for TlsListener {
    fn drop(&mut self) {
        self.accepting.abort();
    }
}

impl Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.done.recv().await {
            Some(connection) => connection,
            // The accepting task ended (the runtime is shutting down).
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local)
    }
}
