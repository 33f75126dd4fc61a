//! What the examples' `main`s share: their flags (parsed by hand, to keep the build small),
//! logging, and the Kubernetes client from a kubeconfig file.
#![allow(dead_code)] // each example uses its part

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The connection flags (`--target`, `--ca-file`, `--cert-file`/`--key-file`, `--token-file`,
/// `--server-name`), `--kubeconfig` and `--namespace`, as the Python examples take them.
#[derive(Debug, Clone, PartialEq)]
pub struct Args {
    /// informerd's gRPC address.
    pub target: String,
    /// PEM roots to verify the daemon with (TLS).
    pub ca_file: Option<PathBuf>,
    /// A client certificate and its key (PEM), for mTLS.
    pub identity: Option<(PathBuf, PathBuf)>,
    /// A file holding the bearer token (a projected service-account token), re-read on each
    /// connect.
    pub token_file: Option<PathBuf>,
    /// The name to verify the daemon's certificate against.
    pub server_name: Option<String>,
    /// The credentials for the writes.
    pub kubeconfig: PathBuf,
    /// The namespace to reconcile.
    pub namespace: String,
}

const USAGE: &str = "options:
  --target ADDR        informerd's gRPC address (default 127.0.0.1:7470)
  --ca-file PATH       PEM roots to verify the daemon (TLS)
  --cert-file PATH     client certificate (PEM) for mTLS, with --key-file
  --key-file PATH      client key (PEM) for mTLS
  --token-file PATH    file holding the bearer token, re-read on each connect
  --server-name NAME   the name to verify the daemon's certificate against
  --kubeconfig PATH    the credentials for the writes (required)
  --namespace NAME     the namespace to reconcile (default \"default\")";

/// `--name value` and `--name=value` flags among `names`, each at most once; `Err` holds the
/// message for the user (`usage` appended).
pub fn flags(
    args: impl IntoIterator<Item = String>,
    names: &[&str],
    usage: &str,
) -> Result<HashMap<String, String>, String> {
    let mut found = HashMap::new();
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        if arg == "--help" || arg == "-h" {
            return Err(usage.to_string());
        }
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) => (f.to_string(), Some(v.to_string())),
            None => (arg.clone(), None),
        };
        let Some(name) = flag.strip_prefix("--").filter(|n| names.contains(n)) else {
            return Err(format!("unknown argument {arg:?}\n{usage}"));
        };
        let value = match inline.or_else(|| args.next()) {
            Some(v) if !v.is_empty() => v,
            _ => return Err(format!("{flag}: a value is required\n{usage}")),
        };
        if found.insert(name.to_string(), value).is_some() {
            return Err(format!("{flag}: given twice\n{usage}"));
        }
    }
    Ok(found)
}

/// Parses `args` (without the program name); `Err` holds the message for the user.
pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Args, String> {
    let mut f = flags(
        args,
        &[
            "target",
            "ca-file",
            "cert-file",
            "key-file",
            "token-file",
            "server-name",
            "kubeconfig",
            "namespace",
        ],
        USAGE,
    )?;
    let Some(kubeconfig) = f.remove("kubeconfig") else {
        return Err(format!("--kubeconfig is required\n{USAGE}"));
    };
    let identity = match (f.remove("cert-file"), f.remove("key-file")) {
        (Some(cert), Some(key)) => Some((cert.into(), key.into())),
        (None, None) => None,
        _ => return Err(format!("--cert-file and --key-file go together\n{USAGE}")),
    };
    Ok(Args {
        target: f
            .remove("target")
            .unwrap_or_else(|| "127.0.0.1:7470".into()),
        ca_file: f.remove("ca-file").map(PathBuf::from),
        identity,
        token_file: f.remove("token-file").map(PathBuf::from),
        server_name: f.remove("server-name"),
        kubeconfig: kubeconfig.into(),
        namespace: f.remove("namespace").unwrap_or_else(|| "default".into()),
    })
}

impl Args {
    /// The SDK's connection options of the flags (the files read now; the token file on each
    /// connect).
    pub fn connect_options(&self) -> anyhow::Result<informerd::ConnectOptions> {
        let mut options = informerd::ConnectOptions::new(self.target.clone());
        if let Some(ca) = &self.ca_file {
            options = options.ca_pem(read(ca)?);
        }
        if let Some((cert, key)) = &self.identity {
            options = options.identity_pem(read(cert)?, read(key)?);
        }
        if let Some(token_file) = &self.token_file {
            options = options.token_file(token_file.clone());
        }
        if let Some(name) = &self.server_name {
            options = options.server_name(name.clone());
        }
        Ok(options)
    }
}

fn read(path: &Path) -> anyhow::Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

/// `parse`'s result, or exit 2 with `about` and the message.
pub fn or_exit<T>(about: &str, parsed: Result<T, String>) -> T {
    parsed.unwrap_or_else(|message| {
        eprintln!("{about}\n\n{message}");
        std::process::exit(2);
    })
}

/// The process's arguments, or exit 2 with a usage message.
pub fn args(about: &str) -> Args {
    or_exit(about, parse(std::env::args().skip(1)))
}

/// Logs to stderr at info (or `RUST_LOG`).
pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

/// A Kubernetes client from a kubeconfig file (its current context), with a 30 s deadline on
/// each request.
pub async fn kube_client(kubeconfig: &Path) -> anyhow::Result<kube::Client> {
    let file = kube::config::Kubeconfig::read_from(kubeconfig)?;
    let mut config =
        kube::Config::from_custom_kubeconfig(file, &kube::config::KubeConfigOptions::default())
            .await?;
    config.read_timeout = Some(Duration::from_secs(30));
    config.write_timeout = Some(Duration::from_secs(30));
    Ok(kube::Client::try_from(config)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn flags_parse_as_the_python_examples_take_them() {
        let a = parse(strings(&["--kubeconfig", "k", "--namespace=demo"])).unwrap();
        assert_eq!(a.target, "127.0.0.1:7470");
        assert_eq!(a.kubeconfig, PathBuf::from("k"));
        assert_eq!(a.namespace, "demo");
        let a = parse(strings(&["--target=h:1", "--kubeconfig=k"])).unwrap();
        assert_eq!(a.target, "h:1");
        assert_eq!((a.ca_file, a.identity, a.token_file), (None, None, None));
        let a = parse(strings(&[
            "--kubeconfig=k",
            "--ca-file=ca.pem",
            "--cert-file",
            "c.pem",
            "--key-file=c.key",
            "--token-file=/var/run/token",
        ]))
        .unwrap();
        assert_eq!(a.ca_file, Some(PathBuf::from("ca.pem")));
        assert_eq!(
            a.identity,
            Some((PathBuf::from("c.pem"), PathBuf::from("c.key")))
        );
        assert_eq!(a.token_file, Some(PathBuf::from("/var/run/token")));
        assert!(
            parse(strings(&["--kubeconfig=k", "--cert-file=c.pem"]))
                .unwrap_err()
                .starts_with("--cert-file and --key-file go together")
        );
        assert!(
            parse(strings(&[]))
                .unwrap_err()
                .starts_with("--kubeconfig is required")
        );
        assert!(
            parse(strings(&["--kubeconfig"]))
                .unwrap_err()
                .starts_with("--kubeconfig: a value")
        );
        assert!(
            parse(strings(&["--nope"]))
                .unwrap_err()
                .starts_with("unknown argument \"--nope\"")
        );
        assert!(
            parse(strings(&["--kubeconfig=a", "--kubeconfig=b"]))
                .unwrap_err()
                .starts_with("--kubeconfig: given twice")
        );
    }
}
