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
//!
//! # Replica sets
//!
//! Reads (`Informers`, `Admin`) go to the configured target, whichever replica it is. `Queues` and
//! `Work` calls go to the leader: a follower answers them with [`Error::NotLeader`] naming the
//! leader's address, and the client opens a channel there with the same options (TLS roots,
//! client certificate, the configured [`ConnectOptions::server_name`], token), remembers it and
//! retries the call on it ([`Client::on_leader`]). While no leader is known the call is retried
//! on the configured target with backoff (100 ms doubling to 2 s) within its deadline; when the
//! leader's channel fails the client goes back to the configured target, which names the next
//! leader. The typed queue calls ([`Client::queues`]) and the controller runtime do this by
//! themselves; the `*_raw` clients do not.
//!
//! ```no_run
//! # async fn f() -> informerd::Result<()> {
//! use informerd::{Client, ConnectOptions, QueueSpec};
//! // The Service reaches any replica; the certificate names the Service, not the pods.
//! let client = Client::connect(
//!     ConnectOptions::new("informerd.informerd.svc:7470")
//!         .ca_pem(std::fs::read("/etc/informerd-ca/ca.crt").unwrap())
//!         .server_name("informerd.informerd.svc"),
//! )?;
//! client.queues().create(QueueSpec::new("jobs")?).await?; // lands on the leader
//! println!("the leader: {:?}", client.leader_address()); // None if the target leads
//! # Ok(()) }
//! ```
use std::collections::{BTreeMap, HashSet};
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
/// closed with `too_many_pings`). A ping every 2 s, with or without calls, and 2 s for its
/// answer notice a stopped or unreachable daemon within about 4 s: a Work stream on a frozen
/// leader breaks, and its reconciles are cancelled, far inside a replica set's lease duration
/// (15 s).
pub const DEFAULT_KEEPALIVE: Duration = Duration::from_secs(2);
/// How long a keepalive ping may stay unanswered before the connection is given up.
pub const DEFAULT_KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(2);
/// The first wait before a `Queues` or `Work` call is retried while no leader is known.
pub const LEADER_BACKOFF_INITIAL: Duration = Duration::from_millis(100);
/// The longest wait between those retries.
pub const LEADER_BACKOFF_MAX: Duration = Duration::from_secs(2);
/// List, Watch and Work responses are capped by bytes on the server (2 MiB by default), but one
/// object larger than the cap comes alone: receive what the daemon may send.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 64 << 20;
/// Every unary call's deadline unless the options say otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// Where and how to reach a daemon.
///
/// The target is `host:port`, `http://host:port`, `https://host:port` (TLS) or
/// `unix:///path/to/socket`. Any certificate option turns TLS on. A replica set's leader, which
/// the client reaches at the address a follower names, gets a channel with these same options.
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
    /// Options for `target` with the defaults: plaintext, no token, keepalive every 2 s (2 s to
    /// answer, also while idle), 64 MiB messages, 30 s deadlines.
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

    /// The name to verify the daemon's certificate against, when it differs from the target's
    /// host. Kept for the channel to a replica set's leader, whose address is a pod IP: set it
    /// to the name the certificate holds (the Service's).
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
    /// ping may go unanswered (default 2 s and 2 s). Pings are sent while idle too.
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

    fn uses_tls(&self) -> bool {
        self.tls || self.target.starts_with("https://")
    }

    /// A lazily connecting channel to `target` (the configured one, or a leader's address) with
    /// these options.
    fn channel_to(&self, target: &str) -> Result<Channel> {
        let (endpoint, unix) = self.endpoint(target)?;
        Ok(match unix {
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
        })
    }

    fn endpoint(&self, target: &str) -> Result<(Endpoint, Option<PathBuf>)> {
        let connect_err = |problem: String| Error::Connect {
            target: target.to_string(),
            problem,
        };
        let (uri, unix) = if let Some(path) = target.strip_prefix("unix://") {
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
        } else if let Some(path) = target.strip_prefix("unix:") {
            (
                "http://informerd.local".to_string(),
                Some(PathBuf::from(path)),
            )
        } else if target.starts_with("http://") || target.starts_with("https://") {
            (target.to_string(), None)
        } else {
            let scheme = if self.uses_tls() { "https" } else { "http" };
            (format!("{scheme}://{target}"), None)
        };
        let mut endpoint = Endpoint::from_shared(uri)
            .map_err(|e| Error::invalid("ConnectOptions.target", format!("{target:?}: {e}")))?
            .http2_keep_alive_interval(self.keepalive)
            .keep_alive_timeout(self.keepalive_timeout)
            .keep_alive_while_idle(true)
            .connect_timeout(self.connect_timeout)
            .tcp_nodelay(true);
        if self.uses_tls() {
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
    /// The replica set's leader, when a follower named it (None: the configured target).
    leader: Mutex<Option<Arc<Leader>>>,
}

/// A channel to the leader of a replica set, at the address a follower named.
struct Leader {
    address: String,
    channel: Channel,
    /// Informers (by id) this client ensured on the leader, so that queue sources and Work
    /// streams can name them there.
    ensured: Mutex<HashSet<String>>,
}

/// A generated client on a route's channel, with the options' message limits.
macro_rules! raw_client {
    ($(#[$doc:meta])* $name:ident, $client:ident) => {
        $(#[$doc])*
        pub fn $name(&self) -> $client<AuthChannel> {
            let n = self.client.inner.options.max_message_bytes;
            $client::new(self.channel())
                .max_decoding_message_size(n)
                .max_encoding_message_size(n)
        }
    };
}

/// Where a `Queues` or `Work` call goes: the configured target, or the replica set's leader at
/// the address a follower named (see [`Client::on_leader`]). Cheap to clone.
#[derive(Clone)]
pub struct Route {
    client: Client,
    leader: Option<Arc<Leader>>,
}

impl std::fmt::Debug for Route {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.leader {
            Some(l) => write!(f, "Route(leader {})", l.address),
            None => write!(f, "Route({})", self.client.inner.options.target),
        }
    }
}

impl Route {
    /// The leader's address the route goes to; `None` for the configured target.
    pub fn address(&self) -> Option<&str> {
        self.leader.as_ref().map(|l| l.address.as_str())
    }

    fn channel(&self) -> AuthChannel {
        let channel = match &self.leader {
            Some(l) => l.channel.clone(),
            None => self.client.inner.channel.clone(),
        };
        InterceptedService::new(channel, self.client.inner.auth.clone())
    }

    /// Whether `self` is where calls go now (`current` is the client's leader).
    fn is(&self, current: &Option<Arc<Leader>>) -> bool {
        match (&self.leader, current) {
            (None, None) => true,
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }

    raw_client! {
        /// The generated `Informers` client on this route (limits set).
        informers_raw, InformersClient
    }
    raw_client! {
        /// The generated `Queues` client on this route.
        queues_raw, QueuesClient
    }
    raw_client! {
        /// The generated `Work` client on this route.
        work_raw, WorkClient
    }
    raw_client! {
        /// The generated `Admin` client on this route.
        admin_raw, AdminClient
    }
}

/// `host:port` of a target as given (`http://host:port/` and `host:port` are the same daemon).
fn host_port(target: &str) -> &str {
    target
        .strip_prefix("http://")
        .or_else(|| target.strip_prefix("https://"))
        .unwrap_or(target)
        .trim_end_matches('/')
}

/// A connection to one daemon; cheap to clone (clones share the channel). In a replica set,
/// `Queues` and `Work` calls go on to the leader through a second channel (see the module docs).
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
        let channel = options.channel_to(&options.target)?;
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
                leader: Mutex::new(None),
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

    fn target_route(&self) -> Route {
        Route {
            client: self.clone(),
            leader: None,
        }
    }

    /// The generated `Informers` client on the configured target (limits set), for calls the
    /// typed API does not cover.
    pub fn informers_raw(&self) -> InformersClient<AuthChannel> {
        self.target_route().informers_raw()
    }

    /// The generated `Queues` client on the configured target. It does not follow a replica
    /// set's leader: use [`Client::leader_unary`] for that.
    pub fn queues_raw(&self) -> QueuesClient<AuthChannel> {
        self.target_route().queues_raw()
    }

    /// The generated `Work` client on the configured target (does not follow the leader; see
    /// [`Client::on_leader`]).
    pub fn work_raw(&self) -> WorkClient<AuthChannel> {
        self.target_route().work_raw()
    }

    /// The generated `Admin` client on the configured target.
    pub fn admin_raw(&self) -> AdminClient<AuthChannel> {
        self.target_route().admin_raw()
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

    /// The address of the replica set's leader that `Queues` and `Work` calls go to; `None`
    /// while they go to the configured target (a single daemon, the leader itself, or no leader
    /// known).
    pub fn leader_address(&self) -> Option<String> {
        self.leader().map(|l| l.address.clone())
    }

    fn leader(&self) -> Option<Arc<Leader>> {
        self.inner
            .leader
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Where the next `Queues` or `Work` call goes.
    pub fn leader_route(&self) -> Route {
        Route {
            client: self.clone(),
            leader: self.leader(),
        }
    }

    /// Learns from `error`, which a `Queues` or `Work` call on `route` ended with (a Work stream
    /// that broke, too): a [`Error::NotLeader`] naming a leader makes the next calls go there;
    /// one naming none, or a connection failure of the leader's channel (the leader gone),
    /// sends them back to the configured target. Errors from a route no longer used change
    /// nothing. [`Client::on_leader`] calls it for every failed attempt.
    pub fn observe(&self, error: &Error, route: &Route) {
        let mut current = self.inner.leader.lock().unwrap_or_else(|p| p.into_inner());
        if !route.is(&current) {
            return;
        }
        match error {
            Error::NotLeader { leader_address, .. } if !leader_address.is_empty() => {
                self.follow(&mut current, leader_address);
            }
            Error::NotLeader { .. } => {
                if let Some(old) = current.take() {
                    tracing::info!(leader = %old.address, "no leader known any more; back to the configured target");
                }
            }
            e if e.is_connection_failure() => {
                if let Some(old) = current.take() {
                    tracing::info!(leader = %old.address, error = %e, "the leader is unavailable; back to the configured target");
                }
            }
            _ => {}
        }
    }

    fn follow(&self, current: &mut Option<Arc<Leader>>, address: &str) {
        let options = &self.inner.options;
        if address == host_port(&options.target) {
            *current = None; // the configured target leads
            return;
        }
        if current.as_ref().is_some_and(|l| l.address == address) {
            return;
        }
        match options.channel_to(address) {
            Ok(channel) => {
                tracing::info!(leader = %address, "following the replica set's leader");
                *current = Some(Arc::new(Leader {
                    address: address.to_string(),
                    channel,
                    ensured: Mutex::new(HashSet::new()),
                }));
            }
            Err(e) => {
                tracing::warn!(leader = %address, error = %e, "cannot follow the leader's address");
                *current = None;
            }
        }
    }

    /// Ensures on the leader the informers this client ensured (on the configured target),
    /// which queue sources and Work streams name by id.
    async fn prepare(&self, route: &Route, timeout: Duration) -> Result<()> {
        let Some(leader) = &route.leader else {
            return Ok(());
        };
        let informers = self
            .inner
            .remembered
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .informers
            .clone();
        for (id, spec) in informers {
            if leader
                .ensured
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .contains(&id)
            {
                continue;
            }
            let mut rpc = route.informers_raw();
            self.unary(
                "EnsureInformer",
                Some(timeout),
                EnsureInformerRequest { spec: Some(spec) },
                |r| rpc.ensure_informer(r),
            )
            .await?;
            leader
                .ensured
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(id);
        }
        Ok(())
    }

    /// Runs `attempt(route, remaining)` — a `Queues` or `Work` call — on the replica set's
    /// leader, following [`Error::NotLeader`] answers (see the module docs), within `timeout`
    /// in all (`None`: the options' deadline). The error of the last attempt is returned when
    /// the deadline leaves no time for another. Against a single daemon this is one attempt on
    /// the configured target.
    ///
    /// ```no_run
    /// # async fn f(client: informerd::Client) -> informerd::Result<()> {
    /// use informerd::v1::LenRequest;
    /// let len = client
    ///     .on_leader("Len", None, |route, remaining| {
    ///         let client = client.clone();
    ///         async move {
    ///             let mut rpc = route.queues_raw();
    ///             let request = LenRequest { queue: "jobs".into() };
    ///             client.unary("Len", Some(remaining), request, |r| rpc.len(r)).await
    ///         }
    ///     })
    ///     .await?
    ///     .len;
    /// # Ok(()) }
    /// ```
    pub async fn on_leader<R, F, Fut>(
        &self,
        what: &str,
        timeout: Option<Duration>,
        mut attempt: F,
    ) -> Result<R>
    where
        F: FnMut(Route, Duration) -> Fut,
        Fut: Future<Output = Result<R>>,
    {
        let timeout = timeout.unwrap_or(self.inner.options.timeout);
        let deadline = tokio::time::Instant::now() + timeout;
        let mut backoff = Backoff::new(LEADER_BACKOFF_INITIAL, LEADER_BACKOFF_MAX);
        // Leader addresses that failed during this call: a follower naming one again (its
        // Lease has not expired yet) is followed after a backoff, not at once.
        let mut failed: HashSet<String> = HashSet::new();
        loop {
            let route = self.leader_route();
            let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
            if remaining.is_zero() {
                return Err(Error::Timeout {
                    what: format!("{what}: no leader answered"),
                    seconds: timeout.as_secs_f64(),
                });
            }
            let result = match self.prepare(&route, remaining).await {
                Ok(()) => attempt(route.clone(), remaining).await,
                Err(e) => Err(e),
            };
            let error = match result {
                Ok(v) => return Ok(v),
                Err(e @ Error::NotLeader { .. }) => e,
                Err(e)
                    if e.is_connection_failure()
                        && e.code() == tonic::Code::Unavailable
                        && route.leader.is_some() =>
                {
                    failed.extend(route.address().map(str::to_string));
                    e
                }
                Err(e) => {
                    self.observe(&e, &route);
                    return Err(e);
                }
            };
            self.observe(&error, &route);
            // A new route (a leader named, or back to the configured target from a leader that
            // is gone or stepped down) is tried at once; the same one again after a backoff.
            let now = self.leader_route();
            if !now.is(&route.leader) && now.address().is_none_or(|a| !failed.contains(a)) {
                tracing::debug!(what, error = %error, route = ?now, "retrying on another replica");
                continue;
            }
            let delay = backoff.next_delay();
            if tokio::time::Instant::now() + delay >= deadline {
                return Err(error);
            }
            tracing::debug!(what, error = %error, "no leader to follow; retrying in {delay:?}");
            tokio::time::sleep(delay).await;
        }
    }

    /// A unary `Queues` call on the replica set's leader ([`Client::on_leader`]), within
    /// `timeout` with its retries: `call` makes it on the route's client.
    ///
    /// ```no_run
    /// # async fn f(client: informerd::Client) -> informerd::Result<()> {
    /// use informerd::v1::NumRequeuesRequest;
    /// let request = NumRequeuesRequest { queue: "jobs".into(), key: "demo/a".into() };
    /// let n = client
    ///     .leader_unary("NumRequeues", None, request, |mut rpc, r| async move {
    ///         rpc.num_requeues(r).await
    ///     })
    ///     .await?
    ///     .requeues;
    /// # Ok(()) }
    /// ```
    pub async fn leader_unary<T, R, F, Fut>(
        &self,
        what: &str,
        timeout: Option<Duration>,
        request: T,
        call: F,
    ) -> Result<R>
    where
        T: Clone,
        F: Fn(QueuesClient<AuthChannel>, tonic::Request<T>) -> Fut,
        Fut: Future<Output = std::result::Result<tonic::Response<R>, tonic::Status>>,
    {
        let call = &call;
        let request = &request;
        self.on_leader(what, timeout, |route, remaining| async move {
            let rpc = route.queues_raw();
            self.unary(what, Some(remaining), request.clone(), |r| call(rpc, r))
                .await
        })
        .await
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
    /// sources still name them; queues are updated with `allow_missing`. Queues go to a replica
    /// set's leader, and the informers too (again: it may be a new leader).
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
        if let Some(leader) = self.leader() {
            leader
                .ensured
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clear();
        }
        for (_, spec) in queues {
            let request = UpdateQueueRequest {
                spec: Some(spec),
                allow_missing: true,
            };
            self.leader_unary("UpdateQueue", None, request, |mut rpc, r| async move {
                rpc.update_queue(r).await
            })
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
