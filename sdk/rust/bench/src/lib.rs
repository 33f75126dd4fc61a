//! What the Rust workers of `make bench-sdk` share (bench/sdk/README.md): their arguments, the
//! output protocol `bench/sdk/run.py` reads (`ready`, `seen KEY`, a last `result {json}` line,
//! as `bench/sdk/proc.py` writes it for the Python workers) and the drain tally.
//!
//! Every worker is its own process so that the driver reads its memory and CPU from `/proc`.
#![warn(missing_docs)]

use std::collections::HashMap;
use std::io::Write;
use std::time::Instant;

use anyhow::{Context as _, anyhow, bail};

/// Printed once the worker's stream (or watch) has started.
pub const READY: &str = "ready";
/// Prefix of the line naming a key reconciled for the first time.
pub const SEEN: &str = "seen ";
/// Prefix of the last line: the run's figures as JSON.
pub const RESULT: &str = "result ";

/// `--name=value` and `--flag` arguments; anything else is an error naming it.
#[derive(Debug, Default)]
pub struct Args {
    values: HashMap<String, String>,
}

impl Args {
    /// The process's arguments. `usage` is printed (and the process ends) for `--help`.
    pub fn from_env(usage: &str) -> anyhow::Result<Args> {
        let argv: Vec<String> = std::env::args().skip(1).collect();
        if argv.iter().any(|a| a == "--help" || a == "-h") {
            println!("{usage}");
            std::process::exit(0);
        }
        Args::parse(argv)
    }

    /// Parses `argv` (without the program name).
    pub fn parse<I: IntoIterator<Item = String>>(argv: I) -> anyhow::Result<Args> {
        let mut values = HashMap::new();
        for arg in argv {
            let Some(body) = arg.strip_prefix("--") else {
                bail!("argument {arg:?}: expected --name=value or --flag");
            };
            let (name, value) = body.split_once('=').unwrap_or((body, "true"));
            if name.is_empty() {
                bail!("argument {arg:?}: no name");
            }
            values.insert(name.to_string(), value.to_string());
        }
        Ok(Args { values })
    }

    /// A string argument that must be given.
    pub fn required(&self, name: &str) -> anyhow::Result<String> {
        self.values
            .get(name)
            .cloned()
            .ok_or_else(|| anyhow!("--{name} is required"))
    }

    /// A string argument with a default.
    pub fn string(&self, name: &str, default: &str) -> String {
        self.values
            .get(name)
            .cloned()
            .unwrap_or_else(|| default.to_string())
    }

    /// A whole-number argument with a default.
    pub fn number(&self, name: &str, default: u64) -> anyhow::Result<u64> {
        match self.values.get(name) {
            None => Ok(default),
            Some(v) => v
                .parse()
                .with_context(|| format!("--{name}={v}: not a whole number")),
        }
    }

    /// A flag: given (`--name` or `--name=true`) or not.
    pub fn flag(&self, name: &str) -> anyhow::Result<bool> {
        match self.values.get(name).map(String::as_str) {
            None | Some("false") => Ok(false),
            Some("true") => Ok(true),
            Some(v) => bail!("--{name}={v}: expected true or false"),
        }
    }
}

/// The tokio runtime `--runtime` names: `current` (the current-thread runtime, the default) or
/// `multi` (the multi-thread one).
pub fn runtime(args: &Args) -> anyhow::Result<tokio::runtime::Runtime> {
    let builder = match args.string("runtime", "current").as_str() {
        "current" => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build(),
        "multi" => tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build(),
        other => bail!("--runtime={other}: expected current or multi"),
    };
    Ok(builder?)
}

/// A `host:port` (or URL) target as a tonic endpoint URI.
pub fn endpoint_uri(target: &str) -> String {
    if target.contains("://") {
        target.to_string()
    } else {
        format!("http://{target}")
    }
}

/// Writes one protocol line and flushes it.
pub fn emit(line: &str) {
    let mut out = std::io::stdout().lock();
    // The driver reading stdout has gone: nothing left to report to.
    let _ = writeln!(out, "{line}").and_then(|()| out.flush());
}

/// Writes a `seen KEY` line for each key, in one write.
pub fn emit_seen<'a, I: IntoIterator<Item = &'a str>>(keys: I) {
    let text: String = keys.into_iter().map(|k| format!("{SEEN}{k}\n")).collect();
    if !text.is_empty() {
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
    }
}

/// Writes the last line, `result {json}`.
pub fn emit_result(result: &serde_json::Value) {
    emit(&format!("{RESULT}{result}"));
}

/// This process's CPU time (user + system), in seconds, from `/proc/self/stat` (0 elsewhere).
pub fn cpu_seconds() -> f64 {
    // /proc reports clock ticks in USER_HZ, which is 100 on every Linux architecture.
    const USER_HZ: f64 = 100.0;
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return 0.0;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // After the command: state is field 0, utime 11 and stime 12.
    (ticks(11) + ticks(12)) as f64 / USER_HZ
}

/// A drain's count: keys taken, timed from the first to the last (the `want`-th).
#[derive(Debug)]
pub struct Tally {
    want: u64,
    done: u64,
    first: Option<Instant>,
    last: Option<Instant>,
}

impl Tally {
    /// A tally that is finished after `want` keys (0: never).
    pub fn new(want: u64) -> Tally {
        Tally {
            want,
            done: 0,
            first: None,
            last: None,
        }
    }

    /// Counts `n` keys taken now.
    pub fn take(&mut self, n: usize) {
        let now = Instant::now();
        self.first.get_or_insert(now);
        self.last = Some(now);
        self.done += n as u64;
    }

    /// Keys taken so far.
    pub fn done(&self) -> u64 {
        self.done
    }

    /// Whether `want` keys have been taken.
    pub fn finished(&self) -> bool {
        self.want > 0 && self.done >= self.want
    }

    /// `{"keys", "seconds", "keys_per_second", "cpu_s"}`, as the Python workers report.
    pub fn result(&self) -> serde_json::Value {
        let seconds = match (self.first, self.last) {
            (Some(first), Some(last)) => (last - first).as_secs_f64(),
            _ => 0.0,
        };
        let rate = if seconds > 0.0 {
            self.done as f64 / seconds
        } else {
            0.0
        };
        serde_json::json!({
            "keys": self.done,
            "seconds": seconds,
            "keys_per_second": rate,
            "cpu_s": cpu_seconds(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: &[&str]) -> anyhow::Result<Args> {
        Args::parse(v.iter().map(|s| s.to_string()))
    }

    #[test]
    fn arguments_parse_and_name_the_bad_one() {
        let a = args(&["--queue=q", "--batch=16", "--seen"]).unwrap();
        assert_eq!(a.required("queue").unwrap(), "q");
        assert_eq!(a.number("batch", 1).unwrap(), 16);
        assert_eq!(a.number("in-flight", 8).unwrap(), 8);
        assert!(a.flag("seen").unwrap());
        assert!(!a.flag("latency").unwrap());
        assert!(
            a.required("target")
                .unwrap_err()
                .to_string()
                .contains("--target")
        );
        let bad = args(&["--batch=x"])
            .unwrap()
            .number("batch", 1)
            .unwrap_err();
        assert!(bad.to_string().contains("--batch=x"), "{bad}");
        assert!(
            args(&["queue"])
                .unwrap_err()
                .to_string()
                .contains("\"queue\"")
        );
    }

    #[test]
    fn tally_counts_to_want() {
        let mut t = Tally::new(3);
        t.take(2);
        assert!(!t.finished());
        t.take(1);
        assert!(t.finished());
        let r = t.result();
        assert_eq!(r["keys"], 3);
        assert!(r["seconds"].as_f64().unwrap() >= 0.0);
        assert!(!Tally::new(0).finished());
    }

    #[test]
    fn cpu_time_is_read() {
        // Burns CPU until a tick is accounted: 0 forever would mean /proc/self/stat is misread.
        let deadline = Instant::now() + std::time::Duration::from_secs(60);
        let mut x = 0u64;
        while cpu_seconds() == 0.0 && Instant::now() < deadline {
            for i in 0..1_000_000u64 {
                x = x.wrapping_mul(31).wrapping_add(i);
            }
            std::hint::black_box(x);
        }
        assert!(cpu_seconds() > 0.0);
    }

    #[test]
    fn endpoint_uris() {
        assert_eq!(endpoint_uri("127.0.0.1:1"), "http://127.0.0.1:1");
        assert_eq!(endpoint_uri("http://h:2"), "http://h:2");
    }
}
