//! Who is asking, over what: the principal and session of every request (issue 15).
//!
//! A connection's [`Session`] names the listener it arrived on, that listener's security
//! protocol, the peer address and the authenticated [`Principal`] (`User:ANONYMOUS` until
//! TLS or SASL says otherwise, as in Kafka). Handlers receive the session with every
//! request; authorization, quotas and audit read the principal from it and nothing else.
//!
//! # Layout
//! - this file: the vocabulary (principal, security protocol, session).
//! - [`listeners`]: `--listeners` and friends, Kafka's syntax and rules.
//! - [`cache`]: the broker's watched copy of the security keyspace.
//! - [`oauth`]: OAUTHBEARER token validation against a JWKS.
//! - [`password`]: password logins against the SCRAM credentials (PLAIN's source, HTTP Basic).
//! - [`quota`]: client quotas (entities, precedence, rates, throttles).
//! - [`startup`]: the security flags checked and loaded at start.
//! - [`acl`]: ACL authorization (the model, the decision, the storage).
//! - [`sasl`]: SASL authentication (SCRAM, PLAIN, re-authentication), pure.
//! - [`tls`]: TLS listeners' configuration, reload and mTLS principals.

pub mod acl;
pub mod cache;
pub mod listeners;
pub mod oauth;
pub mod password;
pub mod quota;
pub mod sasl;
pub mod startup;
pub mod tls;

use std::fmt;
use std::net::SocketAddr;
use std::str::FromStr;

/// An authenticated identity, Kafka's `KafkaPrincipal`: a type (always `User` for the
/// built-in authenticators) and a name. Written `User:alice`, as ACLs and `super.users`
/// name principals.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Principal {
    pub principal_type: String,
    pub name: String,
}

impl Principal {
    /// The principal type of every built-in authenticator.
    pub const USER_TYPE: &'static str = "User";

    /// `User:{name}`.
    pub fn user(name: impl Into<String>) -> Self {
        Principal {
            principal_type: Self::USER_TYPE.to_string(),
            name: name.into(),
        }
    }

    /// `User:ANONYMOUS`: a connection not authenticated (a PLAINTEXT listener, or SSL
    /// without a client certificate).
    pub fn anonymous() -> Self {
        Self::user("ANONYMOUS")
    }

    pub fn is_anonymous(&self) -> bool {
        self.principal_type == Self::USER_TYPE && self.name == "ANONYMOUS"
    }
}

impl fmt::Display for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.principal_type, self.name)
    }
}

/// A principal could not be parsed from `Type:name`.
#[derive(Debug, thiserror::Error)]
#[error("'{0}' is not a principal: expected Type:name, e.g. User:alice")]
pub struct BadPrincipal(pub String);

impl FromStr for Principal {
    type Err = BadPrincipal;

    /// `Type:name`, split at the first `:` (names may hold more, as in Kafka). `User:*`
    /// is the ACL wildcard principal.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.split_once(':') {
            Some((t, n)) if !t.is_empty() && !n.is_empty() => Ok(Principal {
                principal_type: t.to_string(),
                name: n.to_string(),
            }),
            _ => Err(BadPrincipal(s.to_string())),
        }
    }
}

/// A listener's security protocol (Kafka's `listener.security.protocol.map` values).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SecurityProtocol {
    Plaintext,
    Ssl,
    SaslPlaintext,
    SaslSsl,
}

impl SecurityProtocol {
    /// Kafka's name.
    pub fn name(self) -> &'static str {
        match self {
            SecurityProtocol::Plaintext => "PLAINTEXT",
            SecurityProtocol::Ssl => "SSL",
            SecurityProtocol::SaslPlaintext => "SASL_PLAINTEXT",
            SecurityProtocol::SaslSsl => "SASL_SSL",
        }
    }

    /// Whether the connection is TLS.
    pub fn is_tls(self) -> bool {
        matches!(self, SecurityProtocol::Ssl | SecurityProtocol::SaslSsl)
    }

    /// Whether a client must authenticate with SASL before any other request.
    pub fn is_sasl(self) -> bool {
        matches!(
            self,
            SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl
        )
    }
}

impl fmt::Display for SecurityProtocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A security protocol name that is not one of Kafka's four.
#[derive(Debug, thiserror::Error)]
#[error("'{0}' is not a security protocol: one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL")]
pub struct BadSecurityProtocol(pub String);

impl FromStr for SecurityProtocol {
    type Err = BadSecurityProtocol;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s.to_ascii_uppercase().as_str() {
            "PLAINTEXT" => SecurityProtocol::Plaintext,
            "SSL" => SecurityProtocol::Ssl,
            "SASL_PLAINTEXT" => SecurityProtocol::SaslPlaintext,
            "SASL_SSL" => SecurityProtocol::SaslSsl,
            _ => return Err(BadSecurityProtocol(s.to_string())),
        })
    }
}

/// One connection's security context, handed to every request's handler.
#[derive(Clone, Debug)]
pub struct Session {
    /// The client's address (ACL host matching, group member hosts).
    pub peer: SocketAddr,
    /// The listener's name (`PLAINTEXT`, `CLIENT`, …): Metadata answers with the
    /// brokers' addresses on the same listener.
    pub listener: String,
    pub protocol: SecurityProtocol,
    /// Who the connection authenticated as (`User:ANONYMOUS` if it did not).
    pub principal: Principal,
}

impl Session {
    /// A session on a plaintext listener named `PLAINTEXT`, as anonymous.
    pub fn plaintext(peer: SocketAddr) -> Self {
        Session {
            peer,
            listener: SecurityProtocol::Plaintext.name().to_string(),
            protocol: SecurityProtocol::Plaintext,
            principal: Principal::anonymous(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn principals_parse_at_the_first_colon_and_print_back() {
        let p: Principal = "User:CN=a,O=b:c".parse().expect("principal");
        assert_eq!(p.principal_type, "User");
        assert_eq!(p.name, "CN=a,O=b:c");
        assert_eq!(p.to_string(), "User:CN=a,O=b:c");
        for bad in ["", "alice", ":alice", "User:"] {
            assert!(bad.parse::<Principal>().is_err(), "{bad}");
        }
        assert!(Principal::anonymous().is_anonymous());
        assert!(!Principal::user("alice").is_anonymous());
    }

    #[test]
    fn security_protocols_use_kafkas_names() {
        for p in [
            SecurityProtocol::Plaintext,
            SecurityProtocol::Ssl,
            SecurityProtocol::SaslPlaintext,
            SecurityProtocol::SaslSsl,
        ] {
            assert_eq!(p.name().parse::<SecurityProtocol>().expect("name"), p);
        }
        assert_eq!(
            "sasl_ssl".parse::<SecurityProtocol>().expect("any case"),
            SecurityProtocol::SaslSsl
        );
        assert!("TLS".parse::<SecurityProtocol>().is_err());
        assert!(SecurityProtocol::SaslSsl.is_tls() && SecurityProtocol::SaslSsl.is_sasl());
        assert!(!SecurityProtocol::Ssl.is_sasl());
    }
}
