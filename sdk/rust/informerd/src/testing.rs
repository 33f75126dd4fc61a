//! Real processes for integration tests (the `testing` feature): informerd, the fake Kubernetes
//! API server, and a real kube-apiserver.
//!
//! ```no_run
//! use std::time::Duration;
//! use informerd::testing::{Daemon, FakeApiServer};
//! use informerd::{InformerSpec, ListParams};
//!
//! #[tokio::test]
//! async fn reads_configmaps() -> Result<(), Box<dyn std::error::Error>> {
//!     let api = FakeApiServer::start().await?;
//!     api.create_namespace("demo").await?;
//!     api.put_configmap("demo", "settings", &[("a", "1")], &[("app", "web")]).await?;
//!     let daemon = Daemon::start(api.kubeconfig()).await?;
//!     let client = daemon.client()?;
//!     let cms = client.informers().ensure(InformerSpec::new("v1", "ConfigMap").namespace("demo")).await?;
//!     cms.wait_for_sync(Duration::from_secs(30)).await?;
//!     assert_eq!(cms.list(ListParams::default()).await?.len(), 1);
//!     Ok(())
//! } // the daemon and the API server are stopped here, also when the test panics
//! # fn main() {}
//! ```
//!
//! The API is async (call it from `#[tokio::test]`); processes are stopped synchronously when
//! their handle is dropped (SIGTERM, then SIGKILL after a few seconds), so none outlives a test,
//! even a failed one. A handle dropped during a panic keeps its working directory (logs and
//! output) and prints where it is.
//!
//! The binaries are found through environment variables (`make test` sets them):
//!
//! - `INFORMERD_BIN`: the daemon (`bazel-bin/server/informerd`);
//! - `INFORMERD_FAKE_APISERVER`: the fake API server (`out/fake-apiserver`, from
//!   `make fake-apiserver`);
//! - `INFORMERD_KUBE_START`: the real kube-apiserver's start script (`testing/kube/start`).
use std::fmt;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::client::Client;

mod pki;
pub use pki::{KeyPair, Pki};

/// The daemon binary's variable.
pub const INFORMERD_BIN: &str = "INFORMERD_BIN";
/// The fake API server binary's variable.
pub const INFORMERD_FAKE_APISERVER: &str = "INFORMERD_FAKE_APISERVER";
/// The real kube-apiserver start script's variable.
pub const INFORMERD_KUBE_START: &str = "INFORMERD_KUBE_START";

/// How long a process may take to print its address.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a process may take to exit after SIGTERM before it gets SIGKILL.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);
/// Every HTTP request to the fake API server.
const HTTP_TIMEOUT: Duration = Duration::from_secs(30);

/// What went wrong starting, stopping or talking to a test process.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A binary's environment variable is not set, or names nothing.
    #[error("{variable}: {problem}")]
    Binary {
        /// The variable, e.g. `INFORMERD_BIN`.
        variable: &'static str,
        /// What is wrong.
        problem: String,
    },
    /// A process did not start or did not print its address in time.
    #[error("{what}: {problem}")]
    Start {
        /// The process.
        what: String,
        /// What happened, with its output.
        problem: String,
    },
    /// The fake API server answered with an error status.
    #[error("{method} {path}: HTTP {status}: {body}")]
    Http {
        /// The request's method.
        method: String,
        /// The request's path.
        path: String,
        /// The status code, e.g. 409.
        status: u16,
        /// The answer's body.
        body: String,
    },
    /// Reading or writing a file, a socket or a process failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// A condition did not hold within its deadline ([`wait_until`]).
    #[error("not within {seconds:.1} s: {what}")]
    Timeout {
        /// The condition.
        what: String,
        /// The deadline.
        seconds: f64,
    },
    /// The SDK failed (e.g. [`Daemon::client`]).
    #[error(transparent)]
    Sdk(#[from] crate::Error),
}

impl Error {
    /// The HTTP status of an [`Error::Http`].
    pub fn http_status(&self) -> Option<u16> {
        match self {
            Error::Http { status, .. } => Some(*status),
            _ => None,
        }
    }
}

/// A `Result` with the testing [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    let what = what.into();
    move |source| Error::Io { what, source }
}

/// The path of a binary from its environment variable, e.g. `binary(INFORMERD_BIN)`.
pub fn binary(variable: &'static str) -> Result<PathBuf> {
    let value = std::env::var_os(variable)
        .filter(|v| !v.is_empty())
        .ok_or_else(|| Error::Binary {
            variable,
            problem: "not set (make test sets it; see informerd::testing)".into(),
        })?;
    let path = PathBuf::from(value);
    if !path.is_file() {
        return Err(Error::Binary {
            variable,
            problem: format!("{} is not a file", path.display()),
        });
    }
    Ok(path)
}

/// Waits until `condition` returns true, checking every 50 ms; fails naming `what` after
/// `timeout`.
///
/// ```no_run
/// # async fn f(store: informerd::Store<serde_json::Value>) -> informerd::testing::Result<()> {
/// use std::time::Duration;
/// informerd::testing::wait_until(Duration::from_secs(30), "three objects", || {
///     let n = store.len();
///     async move { n == 3 }
/// })
/// .await?;
/// # Ok(()) }
/// ```
pub async fn wait_until<F, Fut>(timeout: Duration, what: &str, mut condition: F) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if tokio::time::timeout_at(deadline, condition()).await == Ok(true) {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(Error::Timeout {
                what: what.to_string(),
                seconds: timeout.as_secs_f64(),
            });
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A signal to stop (or freeze) a process with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signal {
    /// SIGTERM: a graceful shutdown.
    Term,
    /// SIGKILL: a crash.
    Kill,
    /// SIGINT.
    Int,
    /// SIGSTOP: the process freezes (its sockets stay open; only keepalive notices).
    Stop,
    /// SIGCONT: a stopped process goes on.
    Cont,
}

impl Signal {
    fn number(self) -> libc::c_int {
        match self {
            Signal::Term => libc::SIGTERM,
            Signal::Kill => libc::SIGKILL,
            Signal::Int => libc::SIGINT,
            Signal::Stop => libc::SIGSTOP,
            Signal::Cont => libc::SIGCONT,
        }
    }

    /// Whether a stopped process acts on it only once continued.
    fn needs_cont(self) -> bool {
        matches!(self, Signal::Term | Signal::Int)
    }
}

fn send_signal(pid: u32, signal: Signal) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // SAFETY: kill(2) has no memory effects; the pid is a process this module started.
    unsafe { libc::kill(pid, signal.number()) == 0 }
}

/// A working directory: removed when dropped, kept (and printed) when dropped in a panic.
struct WorkDir(Option<tempfile::TempDir>);

impl WorkDir {
    fn new(prefix: &str) -> Result<WorkDir> {
        let dir = tempfile::Builder::new()
            .prefix(prefix)
            .tempdir()
            .map_err(io("create a temporary directory"))?;
        Ok(WorkDir(Some(dir)))
    }

    fn path(&self) -> &Path {
        self.0.as_ref().map(|d| d.path()).unwrap_or(Path::new("/"))
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        if std::thread::panicking()
            && let Some(dir) = self.0.take()
        {
            eprintln!(
                "informerd::testing: kept {} for the failed test",
                dir.keep().display()
            );
        }
    }
}

/// A child process stopped when dropped.
struct Process {
    what: String,
    child: Option<Child>,
}

impl Process {
    fn spawn(what: &str, command: &mut Command, out: &Path, err: &Path) -> Result<Process> {
        let stdout = std::fs::File::create(out).map_err(io(format!("create {}", out.display())))?;
        let stderr = std::fs::File::create(err).map_err(io(format!("create {}", err.display())))?;
        let child = command
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            .spawn()
            .map_err(io(format!("start {what} ({:?})", command.get_program())))?;
        Ok(Process {
            what: what.to_string(),
            child: Some(child),
        })
    }

    fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Sends `signal` to the running process without waiting.
    fn signal(&mut self, signal: Signal) -> bool {
        if self.exited().is_some() {
            return false;
        }
        self.pid().is_some_and(|pid| send_signal(pid, signal))
    }

    fn exited(&mut self) -> Option<ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    /// Waits for the line matching `parse` in `out`; fails when the process exits first.
    async fn wait_for_line<T>(
        &mut self,
        out: &Path,
        err: &Path,
        parse: impl Fn(&str) -> Option<T>,
    ) -> Result<T> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let text = std::fs::read_to_string(out).unwrap_or_default();
            if let Some(found) = text.lines().find_map(&parse) {
                return Ok(found);
            }
            let problem = if let Some(status) = self.exited() {
                format!("exited ({status}) before printing its address")
            } else if Instant::now() >= deadline {
                format!("printed no address within {} s", START_TIMEOUT.as_secs())
            } else {
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            };
            let log = std::fs::read_to_string(err).unwrap_or_default();
            return Err(Error::Start {
                what: self.what.clone(),
                problem: format!("{problem}; output: {text}{log}"),
            });
        }
    }

    /// Signals the process and waits for it to exit (SIGKILL after [`STOP_TIMEOUT`]); a stopped
    /// process is continued after SIGTERM or SIGINT, so that it can act on them. Blocks: also
    /// called from `Drop`.
    fn stop_blocking(&mut self, signal: Signal) -> Option<ExitStatus> {
        let mut child = self.child.take()?;
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        send_signal(child.id(), signal);
        if signal.needs_cont() {
            send_signal(child.id(), Signal::Cont); // a stopped (SIGSTOP) process, too, exits
        }
        let deadline = Instant::now() + STOP_TIMEOUT;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        eprintln!(
            "informerd::testing: {} did not exit within {:?} of {signal:?}; killing it",
            self.what, STOP_TIMEOUT
        );
        let _ = child.kill();
        child.wait().ok()
    }

    /// As [`Process::stop_blocking`], without blocking the runtime.
    async fn stop(&mut self, signal: Signal) -> Option<ExitStatus> {
        let child = self.child.as_mut()?;
        if let Ok(Some(status)) = child.try_wait() {
            self.child = None;
            return Some(status);
        }
        send_signal(child.id(), signal);
        if signal.needs_cont() {
            send_signal(child.id(), Signal::Cont);
        }
        let deadline = Instant::now() + STOP_TIMEOUT;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = child.try_wait() {
                self.child = None;
                return Some(status);
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        self.stop_blocking(Signal::Kill)
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.stop_blocking(Signal::Term);
    }
}

/// An answer of the fake API server.
struct Response {
    status: u16,
    body: Vec<u8>,
}

/// One HTTP/1.1 request (`Connection: close`) with a JSON body, within [`HTTP_TIMEOUT`].
async fn http(addr: &str, method: &str, path: &str, body: Option<&Value>) -> Result<Response> {
    let what = format!("{method} http://{addr}{path}");
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(addr)
            .await
            .map_err(io(what.clone()))?;
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nAccept: application/json\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        stream
            .write_all(request.as_bytes())
            .await
            .map_err(io(what.clone()))?;
        let mut raw = Vec::new();
        stream
            .read_to_end(&mut raw)
            .await
            .map_err(io(what.clone()))?;
        parse_response(&raw).ok_or_else(|| Error::Io {
            what: what.clone(),
            source: std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "not an HTTP/1.1 response",
            ),
        })
    };
    match tokio::time::timeout(HTTP_TIMEOUT, exchange).await {
        Ok(r) => r,
        Err(_) => Err(Error::Timeout {
            what,
            seconds: HTTP_TIMEOUT.as_secs_f64(),
        }),
    }
}

fn parse_response(raw: &[u8]) -> Option<Response> {
    let end = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&raw[..end]).ok()?;
    let mut lines = head.split("\r\n");
    let status = lines.next()?.split(' ').nth(1)?.parse().ok()?;
    let chunked = lines.any(|l| {
        l.split_once(':').is_some_and(|(k, v)| {
            k.trim().eq_ignore_ascii_case("transfer-encoding")
                && v.trim().eq_ignore_ascii_case("chunked")
        })
    });
    let rest = &raw[end + 4..];
    let body = if chunked {
        dechunk(rest)?
    } else {
        rest.to_vec()
    };
    Some(Response { status, body })
}

fn dechunk(mut rest: &[u8]) -> Option<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let line_end = rest.windows(2).position(|w| w == b"\r\n")?;
        let size_text = std::str::from_utf8(&rest[..line_end]).ok()?;
        let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
        rest = &rest[line_end + 2..];
        if size == 0 {
            return Some(body);
        }
        body.extend_from_slice(rest.get(..size)?);
        rest = rest.get(size + 2..)?;
    }
}

/// The fake Kubernetes API server (`testing/apiserver`): fast, with seeding, churn and fault
/// injection through its control endpoint (`/_fake/...`, see its README).
pub struct FakeApiServer {
    process: Process,
    addr: String,
    kubeconfig: PathBuf,
    dir: WorkDir,
}

impl fmt::Debug for FakeApiServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FakeApiServer")
            .field("url", &self.url())
            .finish()
    }
}

impl FakeApiServer {
    /// Starts one on a free port of 127.0.0.1 (found through `INFORMERD_FAKE_APISERVER`).
    pub async fn start() -> Result<FakeApiServer> {
        FakeApiServer::start_with(&[]).await
    }

    /// Starts one with extra flags, e.g. `--resource={...}` for a custom resource.
    pub async fn start_with(args: &[&str]) -> Result<FakeApiServer> {
        let bin = binary(INFORMERD_FAKE_APISERVER)?;
        let dir = WorkDir::new("informerd-fake-")?;
        let kubeconfig = dir.path().join("fake.kubeconfig");
        let (out, err) = (dir.path().join("fake.out"), dir.path().join("fake.err"));
        let mut command = Command::new(bin);
        command
            .arg("--addr=127.0.0.1:0")
            .arg(format!("--kubeconfig-out={}", kubeconfig.display()))
            .args(args);
        let mut process = Process::spawn("fake-apiserver", &mut command, &out, &err)?;
        let url = process
            .wait_for_line(&out, &err, |l| {
                l.strip_prefix("listening on ")
                    .map(|u| u.trim().to_string())
            })
            .await?;
        let addr = url
            .strip_prefix("http://")
            .unwrap_or(&url)
            .trim_end_matches('/')
            .to_string();
        Ok(FakeApiServer {
            process,
            addr,
            kubeconfig,
            dir,
        })
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A kubeconfig for it (pass it to [`Daemon::start`]).
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// Its working directory (kubeconfig, output).
    pub fn workdir(&self) -> &Path {
        self.dir.path()
    }

    /// Its process id.
    pub fn pid(&self) -> Option<u32> {
        self.process.pid()
    }

    /// Sends `method` to `path` (the Kubernetes API, e.g. `/api/v1/namespaces/demo/configmaps`,
    /// or the control endpoint) with `body` as JSON; returns the decoded answer (`Null` when
    /// empty). An error status is [`Error::Http`].
    pub async fn request(&self, method: &str, path: &str, body: Option<&Value>) -> Result<Value> {
        let resp = http(&self.addr, method, path, body).await?;
        if !(200..300).contains(&resp.status) {
            return Err(Error::Http {
                method: method.to_string(),
                path: path.to_string(),
                status: resp.status,
                body: String::from_utf8_lossy(&resp.body).into_owned(),
            });
        }
        if resp.body.iter().all(u8::is_ascii_whitespace) {
            return Ok(Value::Null);
        }
        serde_json::from_slice(&resp.body).map_err(|e| Error::Io {
            what: format!("{method} {path}: decode the answer"),
            source: std::io::Error::new(std::io::ErrorKind::InvalidData, e),
        })
    }

    /// POSTs `body` to a control endpoint, e.g. `control("/_fake/churn", &json!({...}))`.
    pub async fn control(&self, path: &str, body: &Value) -> Result<Value> {
        self.request("POST", path, Some(body)).await
    }

    /// Creates `count` objects named `seed-NNNNNNN` of a built-in resource (e.g.
    /// `"configmaps"`) in `namespace`.
    pub async fn seed(&self, resource: &str, namespace: &str, count: u32) -> Result<()> {
        let body =
            serde_json::json!({"resource": resource, "namespace": namespace, "count": count});
        self.control("/_fake/seed", &body).await.map(drop)
    }

    /// Serves informerd's own `Queue` objects (`queues.informerd.io/v1alpha1`, namespaced): the
    /// resource a replica set's leader keeps the queues created over the API in (the CRD that
    /// `deploy/` installs on a real cluster). Idempotent.
    pub async fn serve_queue_objects(&self) -> Result<()> {
        let body = serde_json::json!({
            "group": "informerd.io",
            "version": "v1alpha1",
            "resource": "queues",
            "kind": "Queue",
            "namespaced": true,
            "customResource": true,
        });
        match self.control("/_fake/resources", &body).await {
            Err(e) if matches!(e.http_status(), Some(400 | 409)) => Ok(()), // registered already
            other => other.map(drop),
        }
    }

    /// Creates the namespace unless it exists.
    pub async fn create_namespace(&self, name: &str) -> Result<()> {
        let body = serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
        match self
            .request("POST", "/api/v1/namespaces", Some(&body))
            .await
        {
            Err(e) if e.http_status() == Some(409) => Ok(()),
            other => other.map(drop),
        }
    }

    /// Creates the ConfigMap, or replaces it (unconditionally) if it exists; returns it.
    pub async fn put_configmap(
        &self,
        namespace: &str,
        name: &str,
        data: &[(&str, &str)],
        labels: &[(&str, &str)],
    ) -> Result<Value> {
        let map = |pairs: &[(&str, &str)]| -> serde_json::Map<String, Value> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), Value::from(*v)))
                .collect()
        };
        let object = serde_json::json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace, "labels": map(labels)},
            "data": map(data),
        });
        let collection = format!("/api/v1/namespaces/{namespace}/configmaps");
        match self.request("POST", &collection, Some(&object)).await {
            Err(e) if e.http_status() == Some(409) => {
                self.request("PUT", &format!("{collection}/{name}"), Some(&object))
                    .await
            }
            other => other,
        }
    }

    /// Deletes the ConfigMap.
    pub async fn delete_configmap(&self, namespace: &str, name: &str) -> Result<()> {
        self.request(
            "DELETE",
            &format!("/api/v1/namespaces/{namespace}/configmaps/{name}"),
            None,
        )
        .await
        .map(drop)
    }

    /// Stops it (SIGTERM) and waits for it.
    pub async fn stop(mut self) -> Option<ExitStatus> {
        self.process.stop(Signal::Term).await
    }
}

/// A real kube-apiserver with embedded etcd (`testing/kube/start`, found through
/// `INFORMERD_KUBE_START`), with an admin kubeconfig. It is not a child of this process: it is
/// stopped by its pid when dropped.
#[derive(Debug)]
pub struct KubeApiServer {
    pid: u32,
    server: String,
    kubeconfig: PathBuf,
    dir: WorkDir,
}

impl fmt::Debug for WorkDir {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.path().fmt(f)
    }
}

impl KubeApiServer {
    /// Starts one and waits until it is ready (up to `timeout`; a first build of the test
    /// server takes minutes more).
    pub async fn start(timeout: Duration) -> Result<KubeApiServer> {
        let script = binary(INFORMERD_KUBE_START)?;
        let dir = WorkDir::new("informerd-kube-")?;
        let kubeconfig = dir.path().join("kube.kubeconfig");
        let output = tokio::process::Command::new(&script)
            .arg("--kubeconfig-out")
            .arg(&kubeconfig)
            .arg("--log")
            .arg(dir.path().join("kube.log"))
            .arg("--timeout")
            .arg(timeout.as_secs().max(1).to_string())
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output();
        let output = tokio::time::timeout(timeout + Duration::from_secs(600), output)
            .await
            .map_err(|_| Error::Timeout {
                what: "testing/kube/start".into(),
                seconds: timeout.as_secs_f64() + 600.0,
            })?
            .map_err(io(format!("run {}", script.display())))?;
        let stdout = String::from_utf8_lossy(&output.stdout);
        let fail = |problem: &str| Error::Start {
            what: "kube-apiserver".into(),
            problem: format!(
                "{problem}: {stdout}{}",
                String::from_utf8_lossy(&output.stderr)
            ),
        };
        if !output.status.success() {
            return Err(fail(&format!(
                "{} failed ({})",
                script.display(),
                output.status
            )));
        }
        let field = |name: &str| {
            stdout
                .lines()
                .find_map(|l| l.strip_prefix(name).map(|v| v.trim().to_string()))
        };
        let pid = field("pid: ")
            .and_then(|p| p.parse().ok())
            .ok_or_else(|| fail("no pid: line"))?;
        let server = field("server: ").ok_or_else(|| fail("no server: line"))?;
        Ok(KubeApiServer {
            pid,
            server,
            kubeconfig,
            dir,
        })
    }

    /// Its URL, `https://127.0.0.1:PORT`.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The admin kubeconfig.
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// Its working directory (kubeconfig, log).
    pub fn workdir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for KubeApiServer {
    fn drop(&mut self) {
        if !send_signal(self.pid, Signal::Term) {
            return;
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        let alive = |pid: u32| {
            // SAFETY: signal 0 only checks that the process exists.
            libc::pid_t::try_from(pid).is_ok_and(|p| unsafe { libc::kill(p, 0) } == 0)
        };
        while Instant::now() < deadline {
            if !alive(self.pid) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        send_signal(self.pid, Signal::Kill);
    }
}

/// Leader election for [`Daemon::start_replica`] (the `--leader_elect*` flags, kube's names).
///
/// Daemons started with equal `namespace`/`name` form a replica set on that Lease, in the
/// default cluster, whose namespace must exist. Each daemon is named `replica-<port>` unless
/// [`LeaderElection::identity`] says otherwise, and advertises its own listen address. Timings
/// left unset keep the daemon's defaults (15 s, 10 s, 2 s, as client-go's);
/// [`LeaderElection::fast`] makes a failover take seconds, for tests.
///
/// ```no_run
/// # async fn f() -> informerd::testing::Result<()> {
/// use informerd::testing::{Daemon, FakeApiServer, LeaderElection};
/// let api = FakeApiServer::start().await?;
/// api.create_namespace("informerd").await?;
/// api.serve_queue_objects().await?;
/// let election = LeaderElection::fast("informerd", "informerd");
/// let a = Daemon::start_replica(api.kubeconfig(), &election, &[]).await?;
/// let b = Daemon::start_replica(api.kubeconfig(), &election, &[]).await?;
/// // Either leads; a client of the other follows it for Queues and Work.
/// let replica = b.client()?.admin().get_replica().await?;
/// # let _ = (a, replica);
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaderElection {
    namespace: String,
    name: String,
    identity: Option<String>,
    lease_duration: Option<Duration>,
    renew_deadline: Option<Duration>,
    retry_period: Option<Duration>,
}

impl LeaderElection {
    /// The Lease `namespace/name`, with the daemon's default timings.
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        LeaderElection {
            namespace: namespace.into(),
            name: name.into(),
            identity: None,
            lease_duration: None,
            renew_deadline: None,
            retry_period: None,
        }
    }

    /// The Lease `namespace/name` with a 3 s lease duration, a 2 s renew deadline and a 500 ms
    /// retry period.
    pub fn fast(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        LeaderElection::new(namespace, name).timings(
            Duration::from_secs(3),
            Duration::from_secs(2),
            Duration::from_millis(500),
        )
    }

    /// `--leader_elect_lease_duration`, `-renew-deadline` and `-retry-period`.
    pub fn timings(
        mut self,
        lease_duration: Duration,
        renew_deadline: Duration,
        retry_period: Duration,
    ) -> Self {
        self.lease_duration = Some(lease_duration);
        self.renew_deadline = Some(renew_deadline);
        self.retry_period = Some(retry_period);
        self
    }

    /// The replica's identity (default `replica-<port>`); give it to one daemon only.
    pub fn identity(mut self, identity: impl Into<String>) -> Self {
        self.identity = Some(identity.into());
        self
    }

    /// The Lease's namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The Lease's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    fn args(&self, identity: &str, advertise_address: &str) -> Vec<String> {
        let mut args = vec![
            "--leader_elect".to_string(),
            format!("--leader_elect_resource_namespace={}", self.namespace),
            format!("--leader_elect_resource_name={}", self.name),
            format!("--leader_elect_identity={identity}"),
            format!("--advertise_address={advertise_address}"),
        ];
        for (flag, value) in [
            ("lease_duration", self.lease_duration),
            ("renew_deadline", self.renew_deadline),
            ("retry_period", self.retry_period),
        ] {
            if let Some(d) = value {
                args.push(format!("--leader_elect_{flag}={}", duration_flag(d)));
            }
        }
        args
    }
}

/// A duration flag's value: `3s`, or `500ms` below whole seconds.
fn duration_flag(d: Duration) -> String {
    let ms = d.as_millis();
    if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

/// A free TCP port of 127.0.0.1 (free when asked: the daemon binds it right after).
fn free_port() -> Result<u16> {
    let listener =
        std::net::TcpListener::bind("127.0.0.1:0").map_err(io("find a free port on 127.0.0.1"))?;
    Ok(listener
        .local_addr()
        .map_err(io("find a free port on 127.0.0.1"))?
        .port())
}

/// informerd against one cluster, on a fixed port of 127.0.0.1 so that [`Daemon::restart`]
/// brings it back at the same target; with [`Daemon::start_replica`], one replica of a set.
pub struct Daemon {
    args: Vec<String>,
    process: Process,
    target: String,
    metrics_url: String,
    identity: String,
    starts: u32,
    dir: WorkDir,
}

impl fmt::Debug for Daemon {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Daemon")
            .field("target", &self.target)
            .field("identity", &self.identity)
            .field("starts", &self.starts)
            .finish()
    }
}

impl Daemon {
    /// Starts informerd (found through `INFORMERD_BIN`) on `kubeconfig`'s cluster.
    pub async fn start(kubeconfig: &Path) -> Result<Daemon> {
        Daemon::start_with(kubeconfig, &[]).await
    }

    /// Starts informerd with extra flags, e.g. `--listen=unix:///path` (a listener beside the
    /// TCP one) or `--idle_timeout=0`. It runs in local-development mode
    /// (`--insecure-allow-unauthenticated`) unless `args` bring TLS (`--tls-cert`), as tests of
    /// authentication do.
    pub async fn start_with(kubeconfig: &Path, args: &[&str]) -> Result<Daemon> {
        Daemon::launch_first(kubeconfig, "127.0.0.1:0".into(), None, args).await
    }

    /// Starts a replica of the set on `election`'s Lease (with extra flags, as
    /// [`Daemon::start_with`]): it listens on a free port of 127.0.0.1, advertises it, and is
    /// named [`Daemon::identity`].
    pub async fn start_replica(
        kubeconfig: &Path,
        election: &LeaderElection,
        args: &[&str],
    ) -> Result<Daemon> {
        let port = free_port()?;
        let listen = format!("127.0.0.1:{port}");
        let identity = election
            .identity
            .clone()
            .unwrap_or_else(|| format!("replica-{port}"));
        let mut all = election.args(&identity, &listen);
        all.extend(args.iter().map(|a| a.to_string()));
        let all: Vec<&str> = all.iter().map(String::as_str).collect();
        Daemon::launch_first(kubeconfig, listen, Some(identity), &all).await
    }

    async fn launch_first(
        kubeconfig: &Path,
        listen: String,
        identity: Option<String>,
        args: &[&str],
    ) -> Result<Daemon> {
        let bin = binary(INFORMERD_BIN)?;
        let dir = WorkDir::new("informerd-")?;
        let mut all = vec![
            bin.display().to_string(),
            format!("--kubeconfig={}", kubeconfig.display()),
        ];
        // `--listen` takes a comma-separated list (the last `--listen` given wins), so the
        // listeners `args` add join the TCP one.
        let extra: String = args
            .iter()
            .filter_map(|a| a.strip_prefix("--listen="))
            .map(|a| format!(",{a}"))
            .collect();
        all.push(format!("--listen={listen}{extra}"));
        all.push("--metrics_listen=127.0.0.1:0".into());
        // Local-development mode (no authentication), unless the test brings its own TLS.
        if !args
            .iter()
            .any(|a| a.starts_with("--tls_cert") || a.starts_with("--tls-cert"))
        {
            all.push("--insecure_allow_unauthenticated".into());
        }
        all.extend(
            args.iter()
                .filter(|a| !a.starts_with("--listen="))
                .map(|a| a.to_string()),
        );
        let (process, target, metrics_url) = Daemon::launch(&all, dir.path(), 1).await?;
        // Restarts listen where the first start did.
        all[2] = format!("--listen={target}{extra}");
        Ok(Daemon {
            args: all,
            process,
            target,
            metrics_url,
            identity: identity.unwrap_or_default(),
            starts: 1,
            dir,
        })
    }

    async fn launch(args: &[String], dir: &Path, start: u32) -> Result<(Process, String, String)> {
        let (out, err) = (
            dir.join(format!("informerd.{start}.out")),
            dir.join(format!("informerd.{start}.log")),
        );
        let mut command = Command::new(&args[0]);
        command.args(&args[1..]);
        let mut process = Process::spawn("informerd", &mut command, &out, &err)?;
        // It prints "grpc: ADDR" per listener, then "metrics: ADDR" once it serves.
        let metrics = process
            .wait_for_line(&out, &err, |l| {
                l.strip_prefix("metrics: ").map(str::to_string)
            })
            .await?;
        let text = std::fs::read_to_string(&out).map_err(io(format!("read {}", out.display())))?;
        let target = text
            .lines()
            .filter_map(|l| l.strip_prefix("grpc: "))
            .find(|a| !a.starts_with("unix:"))
            .ok_or_else(|| Error::Start {
                what: "informerd".into(),
                problem: format!("no TCP grpc: line in {text}"),
            })?
            .to_string();
        let metrics_url = if metrics.starts_with("http") {
            metrics
        } else {
            format!("http://{metrics}")
        };
        Ok((process, target, metrics_url))
    }

    /// `127.0.0.1:PORT`, the same across restarts.
    pub fn target(&self) -> &str {
        &self.target
    }

    /// A client of it with the default options.
    pub fn client(&self) -> Result<Client> {
        Ok(Client::connect_to(self.target.clone())?)
    }

    /// `http://127.0.0.1:PORT` of /metrics, /healthz and /readyz (changes on restart).
    pub fn metrics_url(&self) -> &str {
        &self.metrics_url
    }

    /// Its process id.
    pub fn pid(&self) -> Option<u32> {
        self.process.pid()
    }

    /// Its identity in a replica set ([`Daemon::start_replica`]; "" otherwise).
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// Sends `signal` without waiting (e.g. [`Signal::Stop`] to freeze it, [`Signal::Cont`]);
    /// false when it is not running.
    pub fn signal(&mut self, signal: Signal) -> bool {
        self.process.signal(signal)
    }

    /// How many times it was started.
    pub fn starts(&self) -> u32 {
        self.starts
    }

    /// Its working directory (output and logs of every start).
    pub fn workdir(&self) -> &Path {
        self.dir.path()
    }

    /// The log (stderr) of the current start.
    pub fn log(&self) -> String {
        std::fs::read_to_string(
            self.dir
                .path()
                .join(format!("informerd.{}.log", self.starts)),
        )
        .unwrap_or_default()
    }

    /// Stops it with `signal` and waits for it to exit (SIGKILL after 10 s; a frozen daemon is
    /// continued after SIGTERM); `None` if it was stopped already.
    pub async fn stop(&mut self, signal: Signal) -> Option<ExitStatus> {
        self.process.stop(signal).await
    }

    /// Stops it with `signal` (unless stopped) and starts it again on the same port.
    pub async fn restart(&mut self, signal: Signal) -> Result<()> {
        self.stop(signal).await;
        self.start_again().await
    }

    /// Starts it again on the same port after [`Daemon::stop`].
    pub async fn start_again(&mut self) -> Result<()> {
        if self.process.child.is_some() {
            return Err(Error::Start {
                what: "informerd".into(),
                problem: "still running; stop it first".into(),
            });
        }
        self.starts += 1;
        let (process, target, metrics_url) =
            Daemon::launch(&self.args, self.dir.path(), self.starts).await?;
        if target != self.target {
            return Err(Error::Start {
                what: "informerd".into(),
                problem: format!("came back on {target}, not {}", self.target),
            });
        }
        self.process = process;
        self.metrics_url = metrics_url;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn responses_parse_with_and_without_chunks() {
        let plain = b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\n{}";
        let r = parse_response(plain).unwrap();
        assert_eq!((r.status, r.body.as_slice()), (201, b"{}".as_slice()));
        let chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n{\"a\r\n5;x=y\r\n\":1}\n\r\n0\r\n\r\n";
        let r = parse_response(chunked).unwrap();
        assert_eq!(
            (r.status, r.body.as_slice()),
            (200, b"{\"a\":1}\n".as_slice())
        );
        assert!(parse_response(b"HTTP/1.1 200 OK\r\n").is_none());
        assert!(
            parse_response(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n")
                .is_none()
        );
    }

    #[test]
    fn leader_election_flags() {
        let e = LeaderElection::fast("ha", "lease").identity("me");
        assert_eq!(
            e.args("me", "127.0.0.1:1"),
            [
                "--leader_elect",
                "--leader_elect_resource_namespace=ha",
                "--leader_elect_resource_name=lease",
                "--leader_elect_identity=me",
                "--advertise_address=127.0.0.1:1",
                "--leader_elect_lease_duration=3s",
                "--leader_elect_renew_deadline=2s",
                "--leader_elect_retry_period=500ms",
            ]
        );
        assert_eq!(LeaderElection::new("a", "b").args("i", "x").len(), 5);
    }

    #[test]
    fn a_missing_variable_is_named() {
        // A variable no test sets.
        const UNSET: &str = "INFORMERD_TESTING_NEVER_SET";
        let e = binary(UNSET).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("INFORMERD_TESTING_NEVER_SET: not set"),
            "{e}"
        );
    }
}
