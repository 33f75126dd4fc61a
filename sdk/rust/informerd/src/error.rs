//! One error type for everything the SDK does, built from the daemon's machine-readable details.
//!
//! Every error the daemon returns carries a `google.rpc.ErrorInfo` (domain `informerd.io`) whose
//! reason names an [`ErrorReason`] and whose metadata names what was wrong (`field`, `queue`,
//! `informer_id` ...), and for bad requests a `google.rpc.BadRequest` naming the field. Switch on
//! [`Error::reason`] and [`Error::code`], not on messages:
//!
//! ```no_run
//! # async fn f(client: informerd::Client) {
//! use informerd::{ErrorReason, InformerSpec};
//! match client.informers().ensure(InformerSpec::new("v1", "ConfigMapp")).await {
//!     Err(e) if e.reason() == Some(ErrorReason::ResourceNotFound) => eprintln!("no such kind: {e}"),
//!     Err(e) => eprintln!("{e}"),
//!     Ok(informer) => println!("{}", informer.id()),
//! }
//! # }
//! ```
use std::collections::BTreeMap;
use std::fmt;

use tonic::Code;
use tonic_types::{ErrorDetail, StatusExt};

pub use informerd_api::v1::ErrorReason;

/// The domain of informerd's `ErrorInfo` details.
pub const ERROR_DOMAIN: &str = "informerd.io";

/// A `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A failed call: the gRPC status and the details the daemon attached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Status {
    /// The gRPC status code.
    pub code: Code,
    /// The status message.
    pub message: String,
    /// `ErrorInfo.reason` as sent (a name of [`ErrorReason`]; kept as a string so that reasons
    /// added by a newer daemon still arrive). Empty when the status had no details.
    pub reason: String,
    /// `ErrorInfo.metadata`: what was wrong, e.g. `field`, `queue`, `informer_id`.
    pub metadata: BTreeMap<String, String>,
    /// The first `BadRequest` field violation's field, else `metadata["field"]`.
    pub field: Option<String>,
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}: {}", self.code, self.message)?;
        if !self.reason.is_empty() {
            write!(f, " reason={}", self.reason)?;
        }
        if let Some(field) = &self.field {
            write!(f, " field={field}")?;
        }
        Ok(())
    }
}

/// Everything that can go wrong in the SDK.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The daemon answered a call with an error status.
    #[error("informerd: {0}")]
    Api(Box<Status>),
    /// The daemon is a follower in a replica set: only the leader serves `Queues` and `Work`
    /// (UNAVAILABLE, reason `NOT_LEADER`). A Work stream whose replica stops leading ends with
    /// it too. The typed queue calls and the controller follow `leader_address` by themselves
    /// (see [`crate::Client::on_leader`]); it is [transient](Error::is_transient), so code that
    /// retries those retries this too.
    ///
    /// ```no_run
    /// # async fn f(client: informerd::Client) {
    /// use informerd::Error;
    /// let mut raw = client.queues_raw(); // raw calls do not follow the leader
    /// let request = informerd::v1::LenRequest { queue: "q".into() };
    /// match client.unary("Len", None, request, |r| raw.len(r)).await {
    ///     Err(Error::NotLeader { leader, leader_address, .. }) if !leader_address.is_empty() => {
    ///         println!("{leader} leads, at {leader_address}")
    ///     }
    ///     Err(Error::NotLeader { .. }) => println!("no leader elected yet"),
    ///     other => println!("{other:?}"),
    /// }
    /// # }
    /// ```
    #[error("informerd: not the leader ({}): {status}", describe_leader(.leader, .leader_address))]
    NotLeader {
        /// The leader's identity (the Lease's holderIdentity), "" while none is known.
        leader: String,
        /// Where the leader serves gRPC (`host:port`), "" while none is known.
        leader_address: String,
        /// The status as the daemon sent it.
        status: Box<Status>,
    },
    /// An argument was refused before anything was sent.
    #[error("invalid argument {field}: {problem}")]
    InvalidArgument {
        /// The argument or field, e.g. `InformerSpec.kind`.
        field: String,
        /// What is wrong with it.
        problem: String,
    },
    /// The connection could not be set up (bad target, TLS material, token file).
    #[error("connect to {target}: {problem}")]
    Connect {
        /// The target as given.
        target: String,
        /// What failed.
        problem: String,
    },
    /// A call did not finish within its deadline.
    #[error("deadline of {seconds:.3} s exceeded: {what}")]
    Timeout {
        /// What was waited for.
        what: String,
        /// The deadline.
        seconds: f64,
    },
    /// An object's JSON did not decode into the requested type.
    #[error("decode {key} as {type_name}: {source}")]
    Decode {
        /// The object's key (`namespace/name`).
        key: String,
        /// The Rust type asked for.
        type_name: &'static str,
        /// The decoder's error.
        #[source]
        source: serde_json::Error,
    },
    /// The daemon sent something this SDK cannot use (a protocol violation).
    #[error("protocol: {0}")]
    Protocol(String),
    /// The stream or controller was stopped.
    #[error("stopped")]
    Stopped,
    /// A Kubernetes API call through the user's `kube::Client` failed.
    #[cfg(feature = "kube")]
    #[error("kubernetes: {0}")]
    Kube(#[from] kube::Error),
}

fn describe_leader(leader: &str, address: &str) -> String {
    match (leader.is_empty(), address.is_empty()) {
        (true, _) => "no leader known".to_string(),
        (false, true) => format!("the leader is {leader}, address unknown"),
        (false, false) => format!("the leader is {leader} at {address}"),
    }
}

impl Error {
    /// The refusal of an argument named `field`.
    pub fn invalid(field: impl Into<String>, problem: impl Into<String>) -> Self {
        Error::InvalidArgument {
            field: field.into(),
            problem: problem.into(),
        }
    }

    /// The gRPC code: the daemon's, or the one this error would have had on the wire.
    pub fn code(&self) -> Code {
        match self {
            Error::Api(s) => s.code,
            Error::NotLeader { status, .. } => status.code,
            Error::InvalidArgument { .. } => Code::InvalidArgument,
            Error::Connect { .. } => Code::Unavailable,
            Error::Timeout { .. } => Code::DeadlineExceeded,
            Error::Decode { .. } | Error::Protocol(_) => Code::Internal,
            Error::Stopped => Code::Cancelled,
            #[cfg(feature = "kube")]
            Error::Kube(_) => Code::Unknown,
        }
    }

    /// The daemon's reason, when it sent one this SDK knows.
    pub fn reason(&self) -> Option<ErrorReason> {
        match self {
            Error::Api(s) => ErrorReason::from_str_name(&s.reason),
            Error::NotLeader { .. } => Some(ErrorReason::NotLeader),
            Error::InvalidArgument { .. } => Some(ErrorReason::InvalidField),
            _ => None,
        }
    }

    /// The field that was wrong, if the error names one.
    pub fn field(&self) -> Option<&str> {
        match self {
            Error::Api(s) => s.field.as_deref(),
            Error::InvalidArgument { field, .. } => Some(field),
            _ => None,
        }
    }

    /// The daemon's status, for errors that came from it.
    pub fn status(&self) -> Option<&Status> {
        match self {
            Error::Api(s) | Error::NotLeader { status: s, .. } => Some(s),
            _ => None,
        }
    }

    /// Whether retrying after reconnecting can help: the daemon or the network went away, or a
    /// deadline passed. Errors about the request itself are not transient.
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Api(s) => {
                matches!(
                    s.code,
                    Code::Unavailable | Code::DeadlineExceeded | Code::Unknown | Code::Aborted
                ) || (s.code == Code::Cancelled && s.reason.is_empty())
                    || s.reason == ErrorReason::DaemonShuttingDown.as_str_name()
            }
            Error::NotLeader { .. } | Error::Connect { .. } | Error::Timeout { .. } => true,
            _ => false,
        }
    }

    /// Whether the error came from the connection rather than from the daemon: a transient
    /// failure without the daemon's reason (the connection refused or reset, keepalive, a
    /// deadline), as opposed to an answer of a daemon that is there.
    pub fn is_connection_failure(&self) -> bool {
        match self {
            Error::Api(s) => s.reason.is_empty() && self.is_transient(),
            Error::Connect { .. } | Error::Timeout { .. } => true,
            _ => false,
        }
    }

    /// Whether the daemon said the thing asked for does not exist.
    pub fn is_not_found(&self) -> bool {
        self.code() == Code::NotFound
    }
}

impl From<tonic::Status> for Error {
    fn from(status: tonic::Status) -> Self {
        let mut reason = String::new();
        let mut metadata = BTreeMap::new();
        let mut field = None;
        {
            for detail in status.get_error_details_vec() {
                match detail {
                    ErrorDetail::ErrorInfo(info)
                        if info.domain == ERROR_DOMAIN || reason.is_empty() =>
                    {
                        reason = info.reason;
                        metadata.extend(info.metadata);
                    }
                    ErrorDetail::BadRequest(bad) if field.is_none() => {
                        field = bad.field_violations.into_iter().next().map(|v| v.field);
                    }
                    _ => {}
                }
            }
        }
        if field.is_none() {
            field = metadata.get("field").cloned();
        }
        let not_leader = reason == ErrorReason::NotLeader.as_str_name();
        let status = Box::new(Status {
            code: status.code(),
            message: status.message().to_string(),
            reason,
            metadata,
            field,
        });
        if not_leader {
            let get = |k: &str| status.metadata.get(k).cloned().unwrap_or_default();
            return Error::NotLeader {
                leader: get("leader"),
                leader_address: get("leader_address"),
                status,
            };
        }
        Error::Api(status)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic_types::ErrorDetails;

    #[test]
    fn details_become_reason_metadata_and_field() {
        let mut details = ErrorDetails::with_error_info(
            "INVALID_FIELD",
            ERROR_DOMAIN,
            [("field".to_string(), "spec.kind".to_string())],
        );
        details.set_bad_request(vec![tonic_types::FieldViolation::new("spec.kind", "empty")]);
        let status = tonic::Status::with_error_details(Code::InvalidArgument, "bad kind", details);
        let e = Error::from(status);
        assert_eq!(e.code(), Code::InvalidArgument);
        assert_eq!(e.reason(), Some(ErrorReason::InvalidField));
        assert_eq!(e.field(), Some("spec.kind"));
        assert!(!e.is_transient());
        assert_eq!(
            e.to_string(),
            "informerd: InvalidArgument: bad kind reason=INVALID_FIELD field=spec.kind"
        );
    }

    #[test]
    fn unknown_reasons_are_kept_as_strings() {
        let details = ErrorDetails::with_error_info("FROM_THE_FUTURE", ERROR_DOMAIN, []);
        let e = Error::from(tonic::Status::with_error_details(
            Code::Unavailable,
            "x",
            details,
        ));
        assert_eq!(e.reason(), None);
        assert_eq!(
            e.status().map(|s| s.reason.as_str()),
            Some("FROM_THE_FUTURE")
        );
        assert!(e.is_transient());
    }

    #[test]
    fn not_leader_names_the_leader() {
        let details = ErrorDetails::with_error_info(
            "NOT_LEADER",
            ERROR_DOMAIN,
            [
                ("leader".to_string(), "replica-1".to_string()),
                ("leader_address".to_string(), "10.0.0.7:7470".to_string()),
            ],
        );
        let e = Error::from(tonic::Status::with_error_details(
            Code::Unavailable,
            "this replica does not lead",
            details,
        ));
        match &e {
            Error::NotLeader {
                leader,
                leader_address,
                ..
            } => assert_eq!(
                (leader.as_str(), leader_address.as_str()),
                ("replica-1", "10.0.0.7:7470")
            ),
            other => panic!("{other:?}"),
        }
        assert_eq!(e.code(), Code::Unavailable);
        assert_eq!(e.reason(), Some(ErrorReason::NotLeader));
        assert_eq!(e.status().map(|s| s.reason.as_str()), Some("NOT_LEADER"));
        assert!(e.is_transient());
        assert!(!e.is_connection_failure());
        assert_eq!(
            e.to_string(),
            "informerd: not the leader (the leader is replica-1 at 10.0.0.7:7470): \
             Unavailable: this replica does not lead reason=NOT_LEADER"
        );

        let none = Error::from(tonic::Status::with_error_details(
            Code::Unavailable,
            "no leader",
            ErrorDetails::with_error_info("NOT_LEADER", ERROR_DOMAIN, []),
        ));
        assert!(
            matches!(&none, Error::NotLeader { leader, leader_address, .. } if leader.is_empty() && leader_address.is_empty()),
            "{none:?}"
        );
        assert!(none.to_string().contains("no leader known"), "{none}");
    }

    #[test]
    fn connection_failures_have_no_reason() {
        assert!(
            Error::from(tonic::Status::unavailable("connection refused")).is_connection_failure()
        );
        let refused = Error::from(tonic::Status::with_error_details(
            Code::Unavailable,
            "the API server is down",
            ErrorDetails::with_error_info("AUTHORIZATION_UNAVAILABLE", ERROR_DOMAIN, []),
        ));
        assert!(refused.is_transient());
        assert!(!refused.is_connection_failure());
        assert!(!Error::from(tonic::Status::not_found("gone")).is_connection_failure());
    }

    #[test]
    fn a_bare_status_has_no_details() {
        let e = Error::from(tonic::Status::not_found("gone"));
        assert!(e.is_not_found());
        assert_eq!(e.reason(), None);
        assert_eq!(e.field(), None);
    }
}
