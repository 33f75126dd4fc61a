//! The connection to a daemon: options, the channel, deadlines, and what was ensured.
//!
//! ```no_run
//! # async fn f() -> informerd::Result<()> {
//! use std::time::Duration;
//! use informerd::{Client, ConnectOptions};
//! let client = Client::connect(
//!     ConnectOptions::new("https://informerd.informerd.svc:7470")
//!         .ca_pem(std::fs::read("/etc/informerd/ca.crt").unwrap())
//!         .token_file("/var/run/secrets/kubernetes.io/serviceaccount/token")
//!         .timeout(Duration::from_secs(10)),
//! )?;
//! let informer = client.informers().ensure(informerd::InformerSpec::new("v1", "ConfigMap")).await?;
//! # Ok(()) }
//! ```
use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use informerd_api::v1::{
    EnsureInformerRequest, InformerSpec as InformerSpecProto, QueueSpec, UpdateQueueRequest,
    admin_client::AdminClient, informers_client::InformersClient, queues_client::QueuesClient,
    work_client::WorkClient,
};
use tonic::metadata::AsciiMetadataValue;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

use crate::error::{Error, Result};

/// The daemon lets clients ping every second at most (pings more often get the connection
/// closed with `too_many_pings`); 10 s notices a dead daemon quickly without coming near that.
pub const DEFAULT_KEEPALIVE: Duration = Duration::from_secs(10);
/// How long a keepalive ping may stay unanswered before the connection is given up.
pub const DEFAULT_KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(5);
/// List, Watch and Work responses are capped by bytes on the server (2 MiB by default), but one
/// object larger than the cap comes alone: receive what the daemon may send.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 64 << 20;
/// Every unary call's deadline unless the options say otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// Where and how to reach a daemon.
///
/// The target is `host:port`, `http://host:port`, `https://host:port` (TLS) or
/// `unix:///path/to/socket`. Any certificate option turns TLS on.
#[derive(Clone, Debug)]
pub struct ConnectOptions {
    target: String,
    tls: bool,
    ca_pem: Option<Vec<u8>>,
    identity: Option<(Vec<u8>, Vec<u8>)>,
    server_name: Option<String>,
    token: Option<String>,
    token_file: Option<PathBuf>,
    keepalive: Duration,
    keepalive_timeout: Duration,
    max_message_bytes: usize,
    timeout: Duration,
    connect_timeout: Duration,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        ConnectOptions::new("127.0.0.1:7470")
    }
}

impl ConnectOptions {
    /// Options for `target` with the defaults: plaintext, no token, keepalive every 10 s, 64 MiB
    /// messages, 30 s deadlines.
    pub fn new(target: impl Into<String>) -> Self {
        ConnectOptions {
            target: target.into(),
            tls: false,
            ca_pem: None,
            identity: None,
            server_name: None,
            token: None,
            token_file: None,
            keepalive: DEFAULT_KEEPALIVE,
            keepalive_timeout: DEFAULT_KEEPALIVE_TIMEOUT,
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            timeout: DEFAULT_TIMEOUT,
            connect_timeout: Duration::from_secs(10),
        }
    }

    /// The target as given.
    pub fn target(&self) -> &str {
        &self.target
    }

    /// Use TLS, verifying the daemon against the system's roots unless [`Self::ca_pem`] is given.
    pub fn tls(mut self) -> Self {
        self.tls = true;
        self
    }

    /// Verify the daemon against this CA (PEM). Turns TLS on.
    pub fn ca_pem(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.ca_pem = Some(pem.into());
        self.tls = true;
        self
    }

    /// Present this client certificate and key (PEM) for mTLS. Turns TLS on.
    pub fn identity_pem(mut self, cert: impl Into<Vec<u8>>, key: impl Into<Vec<u8>>) -> Self {
        self.identity = Some((cert.into(), key.into()));
        self.tls = true;
        self
    }

    /// The name to verify the daemon's certificate against, when it differs from the target's host.
    pub fn server_name(mut self, name: impl Into<String>) -> Self {
        self.server_name = Some(name.into());
        self
    }

    /// Send `authorization: Bearer <token>` on every call.
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// Read the bearer token from this file, again on every call at most every 10 s (projected
    /// service-account tokens rotate).
    pub fn token_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.token_file = Some(path.into());
        self
    }

    /// The HTTP/2 keepalive ping interval (at least 1 s, the daemon's minimum) and how long a
    /// ping may go unanswered.
    pub fn keepalive(mut self, interval: Duration, timeout: Duration) -> Self {
        self.keepalive = interval;
        self.keepalive_timeout = timeout;
        self
    }

    /// The largest message sent or received.
    pub fn max_message_bytes(mut self, bytes: usize) -> Self {
        self.max_message_bytes = bytes;
        self
    }

    /// Every unary call's deadline (calls that take their own timeout use theirs).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The default unary deadline.
    pub fn default_timeout(&self) -> Duration {
        self.timeout
    }

    /// How long one connection attempt may take.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    fn check(&self) -> Result<()> {
        if self.target.trim().is_empty() {
            return Err(Error::invalid(
                "ConnectOptions.target",
                "empty (want host:port or unix:///path)",
            ));
        }
        if self.keepalive < Duration::from_secs(1) {
            return Err(Error::invalid(
                "ConnectOptions.keepalive",
                format!(
                    "{:?} is below the daemon's minimum ping interval of 1 s",
                    self.keepalive
                ),
            ));
        }
        if self.timeout.is_zero() {
            return Err(Error::invalid("ConnectOptions.timeout", "must be positive"));
        }
        if self.max_message_bytes < 4 << 20 {
            return Err(Error::invalid(
                "ConnectOptions.max_message_bytes",
                format!(
                    "{} is below 4 MiB; the daemon sends messages up to its 2 MiB cap and larger single objects",
                    self.max_message_bytes
                ),
            ));
        }
        Ok(())
    }

    fn endpoint(&self) -> Result<(Endpoint, Option<PathBuf>)> {
        let connect_err = |problem: String| Error::Connect {
            target: self.target.clone(),
            problem,
        };
        let (uri, unix) = if let Some(path) = self.target.strip_prefix("unix://") {
            if path.is_empty() {
                return Err(Error::invalid(
                    "ConnectOptions.target",
                    "unix:// without a path",
                ));
            }
            (
                "http://informerd.local".to_string(),
                Some(PathBuf::from(path)),
            )
        } else if let Some(path) = self.target.strip_prefix("unix:") {
            (
                "http://informerd.local".to_string(),
                Some(PathBuf::from(path)),
            )
        } else if self.target.starts_with("http://") || self.target.starts_with("https://") {
            (self.target.clone(), None)
        } else {
            let scheme = if self.tls { "https" } else { "http" };
            (format!("{scheme}://{}", self.target), None)
        };
        let mut endpoint = Endpoint::from_shared(uri)
            .map_err(|e| {
                Error::invalid("ConnectOptions.target", format!("{:?}: {e}", self.target))
            })?
            .http2_keep_alive_interval(self.keepalive)
            .keep_alive_timeout(self.keepalive_timeout)
            .keep_alive_while_idle(true)
            .connect_timeout(self.connect_timeout)
            .tcp_nodelay(true);
        if self.tls || self.target.starts_with("https://") {
            let mut tls = ClientTlsConfig::new();
            match &self.ca_pem {
                Some(pem) => tls = tls.ca_certificate(Certificate::from_pem(pem)),
                None => tls = tls.with_native_roots(),
            }
            if let Some((cert, key)) = &self.identity {
                tls = tls.identity(Identity::from_pem(cert, key));
            }
            if let Some(name) = &self.server_name {
                tls = tls.domain_name(name.clone());
            }
            endpoint = endpoint
                .tls_config(tls)
                .map_err(|e| connect_err(format!("TLS: {e}")))?;
        }
        Ok((endpoint, unix))
    }
}

/// Adds the bearer token to every call.
#[derive(Clone)]
pub struct Auth {
    token: Option<AsciiMetadataValue>,
    file: Option<Arc<TokenFile>>,
}

struct TokenFile {
    path: PathBuf,
    cached: Mutex<Option<(Instant, AsciiMetadataValue)>>,
}

const TOKEN_FILE_REREAD: Duration = Duration::from_secs(10);

impl TokenFile {
    fn value(&self) -> std::result::Result<AsciiMetadataValue, tonic::Status> {
        let mut cached = self.cached.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((at, v)) = cached.as_ref()
            && at.elapsed() < TOKEN_FILE_REREAD
        {
            return Ok(v.clone());
        }
        let token = std::fs::read_to_string(&self.path).map_err(|e| {
            tonic::Status::unauthenticated(format!("token_file {}: {e}", self.path.display()))
        })?;
        let v = bearer(token.trim()).map_err(|e| {
            tonic::Status::unauthenticated(format!("token_file {}: {e}", self.path.display()))
        })?;
        *cached = Some((Instant::now(), v.clone()));
        Ok(v)
    }
}

fn bearer(token: &str) -> std::result::Result<AsciiMetadataValue, String> {
    format!("Bearer {token}")
        .parse()
        .map_err(|_| "the token is not printable ASCII".to_string())
}

impl tonic::service::Interceptor for Auth {
    fn call(
        &mut self,
        mut req: tonic::Request<()>,
    ) -> std::result::Result<tonic::Request<()>, tonic::Status> {
        let value = match (&self.token, &self.file) {
            (_, Some(file)) => Some(file.value()?),
            (Some(v), None) => Some(v.clone()),
            (None, None) => None,
        };
        if let Some(v) = value {
            req.metadata_mut().insert("authorization", v);
        }
        Ok(req)
    }
}

/// The channel with the token added to every call.
pub type AuthChannel = InterceptedService<Channel, Auth>;

#[derive(Default)]
struct Remembered {
    informers: BTreeMap<String, InformerSpecProto>,
    queues: BTreeMap<String, QueueSpec>,
}

struct Inner {
    options: ConnectOptions,
    channel: Channel,
    auth: Auth,
    remembered: Mutex<Remembered>,
}

/// A connection to one daemon; cheap to clone (clones share the channel).
///
/// The channel connects lazily and reconnects by itself; calls made while the daemon is away fail
/// with a transient [`Error`] (see [`Error::is_transient`]).
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("target", &self.inner.options.target)
            .finish()
    }
}

impl Client {
    /// A client for `options`. Does not wait for the daemon: the first call connects.
    /// Must be called within a tokio runtime.
    pub fn connect(options: ConnectOptions) -> Result<Client> {
        options.check()?;
        let (endpoint, unix) = options.endpoint()?;
        let channel = match unix {
            None => endpoint.connect_lazy(),
            Some(path) => endpoint.connect_with_connector_lazy(tower::service_fn(
                move |_: tonic::transport::Uri| {
                    let path = path.clone();
                    async move {
                        let stream = tokio::net::UnixStream::connect(path).await?;
                        Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
                    }
                },
            )),
        };
        let token = match &options.token {
            Some(t) => Some(bearer(t).map_err(|e| Error::invalid("ConnectOptions.token", e))?),
            None => None,
        };
        let file = options.token_file.as_ref().map(|path| {
            Arc::new(TokenFile {
                path: path.clone(),
                cached: Mutex::new(None),
            })
        });
        if let Some(f) = &file {
            f.value().map_err(|e| Error::Connect {
                target: options.target.clone(),
                problem: e.message().to_string(),
            })?;
        }
        Ok(Client {
            inner: Arc::new(Inner {
                options,
                channel,
                auth: Auth { token, file },
                remembered: Mutex::new(Remembered::default()),
            }),
        })
    }

    /// A client for `target` with the default options.
    pub fn connect_to(target: impl Into<String>) -> Result<Client> {
        Client::connect(ConnectOptions::new(target))
    }

    /// The options this client was made with.
    pub fn options(&self) -> &ConnectOptions {
        &self.inner.options
    }

    fn channel(&self) -> AuthChannel {
        InterceptedService::new(self.inner.channel.clone(), self.inner.auth.clone())
    }

    /// The generated `Informers` client on this connection (limits set), for calls the typed API
    /// does not cover.
    pub fn informers_raw(&self) -> InformersClient<AuthChannel> {
        let n = self.inner.options.max_message_bytes;
        InformersClient::new(self.channel())
            .max_decoding_message_size(n)
            .max_encoding_message_size(n)
    }

    /// The generated `Queues` client on this connection.
    pub fn queues_raw(&self) -> QueuesClient<AuthChannel> {
        let n = self.inner.options.max_message_bytes;
        QueuesClient::new(self.channel())
            .max_decoding_message_size(n)
            .max_encoding_message_size(n)
    }

    /// The generated `Work` client on this connection.
    pub fn work_raw(&self) -> WorkClient<AuthChannel> {
        let n = self.inner.options.max_message_bytes;
        WorkClient::new(self.channel())
            .max_decoding_message_size(n)
            .max_encoding_message_size(n)
    }

    /// The generated `Admin` client on this connection.
    pub fn admin_raw(&self) -> AdminClient<AuthChannel> {
        let n = self.inner.options.max_message_bytes;
        AdminClient::new(self.channel())
            .max_decoding_message_size(n)
            .max_encoding_message_size(n)
    }

    /// Runs one unary call with a deadline (`timeout`, else the options'): the deadline goes to
    /// the daemon as `grpc-timeout` and is enforced here too.
    pub async fn unary<T, R, F, Fut>(
        &self,
        what: &str,
        timeout: Option<Duration>,
        request: T,
        call: F,
    ) -> Result<R>
    where
        F: FnOnce(tonic::Request<T>) -> Fut,
        Fut: Future<Output = std::result::Result<tonic::Response<R>, tonic::Status>>,
    {
        let timeout = timeout.unwrap_or(self.inner.options.timeout);
        let mut req = tonic::Request::new(request);
        req.set_timeout(timeout);
        match tokio::time::timeout(timeout + Duration::from_millis(200), call(req)).await {
            Ok(Ok(resp)) => Ok(resp.into_inner()),
            Ok(Err(status)) => Err(Error::from(status)),
            Err(_) => Err(Error::Timeout {
                what: what.to_string(),
                seconds: timeout.as_secs_f64(),
            }),
        }
    }

    pub(crate) fn remember_informer(&self, id: &str, spec: &InformerSpecProto) {
        let mut r = self
            .inner
            .remembered
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        r.informers.insert(id.to_string(), spec.clone());
    }

    pub(crate) fn forget_informer(&self, id: &str) {
        let mut r = self
            .inner
            .remembered
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        r.informers.remove(id);
    }

    pub(crate) fn remember_queue(&self, spec: &QueueSpec) {
        let mut r = self
            .inner
            .remembered
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        r.queues.insert(spec.name.clone(), spec.clone());
    }

    pub(crate) fn forget_queue(&self, name: &str) {
        let mut r = self
            .inner
            .remembered
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        r.queues.remove(name);
    }

    /// Ensures again every informer and queue this client ensured or created, e.g. after the
    /// daemon restarted and lost them. Informer ids are stable for an equal spec, so queue
    /// sources still name them; queues are updated with `allow_missing`.
    pub async fn reensure(&self) -> Result<()> {
        let (informers, queues) = {
            let r = self
                .inner
                .remembered
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            (r.informers.clone(), r.queues.clone())
        };
        for (id, spec) in informers {
            let mut rpc = self.informers_raw();
            let info = self
                .unary(
                    "EnsureInformer",
                    None,
                    EnsureInformerRequest { spec: Some(spec) },
                    |r| rpc.ensure_informer(r),
                )
                .await?;
            if info.id != id {
                return Err(Error::Protocol(format!(
                    "informer {id} came back as {} after a restart",
                    info.id
                )));
            }
        }
        for (_, spec) in queues {
            let mut rpc = self.queues_raw();
            self.unary(
                "UpdateQueue",
                None,
                UpdateQueueRequest {
                    spec: Some(spec),
                    allow_missing: true,
                },
                |r| rpc.update_queue(r),
            )
            .await?;
        }
        Ok(())
    }
}

/// Jittered exponential backoff for reconnects: each wait is uniform in [cap/2, cap], the cap
/// doubling from `initial` to `max`.
#[derive(Clone, Debug)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    attempt: u32,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff::new(Duration::from_millis(200), Duration::from_secs(10))
    }
}

impl Backoff {
    /// A backoff from `initial` up to `max`.
    pub fn new(initial: Duration, max: Duration) -> Self {
        Backoff {
            initial,
            max: max.max(initial),
            attempt: 0,
        }
    }

    /// The next wait.
    pub fn next_delay(&mut self) -> Duration {
        let factor = 2u32.saturating_pow(self.attempt.min(30));
        let cap = self.initial.saturating_mul(factor).min(self.max);
        self.attempt = self.attempt.saturating_add(1);
        let low = cap / 2;
        let span = (cap - low).as_nanos() as u64;
        low + Duration::from_nanos(if span == 0 {
            0
        } else {
            rand::random_range(0..=span)
        })
    }

    /// Back to the first wait (after a success).
    pub fn reset(&mut self) {
        self.attempt = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_with_jitter_and_stops_at_max() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_millis(1000));
        let first = b.next_delay();
        assert!(
            first >= Duration::from_millis(50) && first <= Duration::from_millis(100),
            "{first:?}"
        );
        let second = b.next_delay();
        assert!(
            second >= Duration::from_millis(100) && second <= Duration::from_millis(200),
            "{second:?}"
        );
        let third = b.next_delay();
        assert!(
            third >= Duration::from_millis(200) && third <= Duration::from_millis(400),
            "{third:?}"
        );
        let fourth = b.next_delay();
        assert!(
            fourth >= Duration::from_millis(400) && fourth <= Duration::from_millis(800),
            "{fourth:?}"
        );
        for _ in 0..40 {
            let d = b.next_delay();
            assert!(
                d >= Duration::from_millis(500) && d <= Duration::from_millis(1000),
                "{d:?}"
            );
        }
        b.reset();
        assert!(b.next_delay() <= Duration::from_millis(100));
    }

    #[tokio::test]
    async fn bad_options_name_the_field() {
        let e = Client::connect(ConnectOptions::new("")).unwrap_err();
        assert_eq!(e.field(), Some("ConnectOptions.target"));
        let e = Client::connect(
            ConnectOptions::new("127.0.0.1:1")
                .keepalive(Duration::from_millis(10), Duration::from_secs(1)),
        )
        .unwrap_err();
        assert_eq!(e.field(), Some("ConnectOptions.keepalive"));
        let e = Client::connect(ConnectOptions::new("127.0.0.1:1").token("a\nb")).unwrap_err();
        assert_eq!(e.field(), Some("ConnectOptions.token"));
        let e =
            Client::connect(ConnectOptions::new("127.0.0.1:1").token_file("/nonexistent/token"))
                .unwrap_err();
        assert!(e.to_string().contains("/nonexistent/token"), "{e}");
        let e = Client::connect(ConnectOptions::new("not a uri ::")).unwrap_err();
        assert_eq!(e.field(), Some("ConnectOptions.target"));
    }
}
