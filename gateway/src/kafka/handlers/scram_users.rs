//! DescribeUserScramCredentials (API 50) and AlterUserScramCredentials (API 51), with
//! Kafka's semantics (`ScramImage.describe`, `ScramControlManager.alterCredentials`):
//!
//! - describe: no users named = every user; a user named twice is DUPLICATE_RESOURCE, an
//!   unknown one RESOURCE_NOT_FOUND; only mechanisms and iterations are shown.
//! - alter: the client sends salt, salted password and iterations (the password never
//!   travels); the broker derives StoredKey/ServerKey and keeps those. A user altered
//!   twice in one request is DUPLICATE_RESOURCE, an unknown mechanism
//!   UNSUPPORTED_SASL_MECHANISM, an empty user or iterations outside 4096..=16384
//!   UNACCEPTABLE_CREDENTIAL, deleting a credential that is not there RESOURCE_NOT_FOUND.
//!
//! Each user is one record (`security/scram/{user}`) changed by compare-and-swap on its
//! version; a concurrent alter of the same user is retried a few times on a fresh read.

use crate::broker::Broker;
use crate::error::BrokerError;
use crate::security::acl::{AclOperation, ResourceType, CLUSTER_NAME};
use crate::security::sasl::credential::SALT_BYTES_MAX;
use crate::security::sasl::{ScramEntry, ScramHash, UserCredentials};
use crate::security::Session;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
use kafka_protocol::messages::describe_user_scram_credentials_response::{
    CredentialInfo, DescribeUserScramCredentialsResult,
};
use kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse,
    DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse,
};
use oxbow_metadata::{SecurityEvent, SecurityKind, SecurityRecord};
use std::collections::BTreeMap;

/// Compare-and-swap attempts of one user's record before giving up (RequestTimedOut, which
/// clients retry). Every conflict means another alter of the user landed, so N concurrent
/// alters of one user need at most N attempts; admins rarely race more than a few.
const CAS_ATTEMPTS: usize = 16;

/// Kafka's bound on a salted password's size is none; this one keeps records small.
const SALTED_PASSWORD_BYTES_MAX: usize = 1024;

/// Needs DESCRIBE on the cluster (CLUSTER_AUTHORIZATION_FAILED for the whole request), as
/// in Kafka.
pub async fn describe(
    broker: &Broker,
    session: &Session,
    r: DescribeUserScramCredentialsRequest,
) -> DescribeUserScramCredentialsResponse {
    if !broker.authorize(
        session,
        AclOperation::Describe,
        ResourceType::Cluster,
        CLUSTER_NAME,
    ) {
        // As Kafka's error response: the error at the top and for each user named.
        let code = ResponseError::ClusterAuthorizationFailed;
        let message = Some(super::str_bytes(&code.to_string()));
        let results = r
            .users
            .iter()
            .flatten()
            .map(|u| {
                DescribeUserScramCredentialsResult::default()
                    .with_user(u.name.clone())
                    .with_error_code(code.code())
                    .with_error_message(message.clone())
            })
            .collect();
        return DescribeUserScramCredentialsResponse::default()
            .with_error_code(code.code())
            .with_error_message(message)
            .with_results(results);
    }
    // (user, named more than once), in the order first named; all users if none named.
    let mut users: Vec<(String, bool)> = Vec::new();
    match r.users.filter(|u| !u.is_empty()) {
        None => {
            for record in broker.security.records(SecurityKind::ScramCredential) {
                users.push((record.name, false));
            }
        }
        Some(named) => {
            for u in named {
                let name = u.name.to_string();
                match users.iter_mut().find(|(n, _)| *n == name) {
                    Some((_, dup)) => *dup = true,
                    None => users.push((name, false)),
                }
            }
        }
    }
    let results = users
        .into_iter()
        .map(|(user, duplicate)| {
            let result = DescribeUserScramCredentialsResult::default().with_user(super::str_bytes(&user));
            if duplicate {
                return result
                    .with_error_code(ResponseError::DuplicateResource.code())
                    .with_error_message(Some(super::str_bytes(&format!(
                        "Cannot describe SCRAM credentials for the same user twice in a single request: {user}"
                    ))));
            }
            match read(broker, &user) {
                Ok(Some((creds, _))) if !creds.is_empty() => result.with_credential_infos(
                    creds
                        .mechanisms()
                        .map(|(h, e)| {
                            CredentialInfo::default()
                                .with_mechanism(h.type_id())
                                .with_iterations(i32::try_from(e.iterations).unwrap_or(i32::MAX))
                        })
                        .collect(),
                ),
                Ok(_) => result
                    .with_error_code(ResponseError::ResourceNotFound.code())
                    .with_error_message(Some(super::str_bytes(&format!(
                        "attemptToDescribeUserThatDoesNotExist: {user}"
                    )))),
                Err(why) => result
                    .with_error_code(ResponseError::UnknownServerError.code())
                    .with_error_message(Some(super::str_bytes(&why))),
            }
        })
        .collect();
    DescribeUserScramCredentialsResponse::default().with_results(results)
}

/// One user's change in an alter request.
enum Change {
    Delete(ScramHash),
    Upsert(ScramHash, ScramEntry),
}

/// Needs ALTER on the cluster (CLUSTER_AUTHORIZATION_FAILED for every user named), as in
/// Kafka.
pub async fn alter(
    broker: &Broker,
    session: &Session,
    r: AlterUserScramCredentialsRequest,
) -> AlterUserScramCredentialsResponse {
    if !broker.authorize(
        session,
        AclOperation::Alter,
        ResourceType::Cluster,
        CLUSTER_NAME,
    ) {
        let code = ResponseError::ClusterAuthorizationFailed;
        let refused = || Some((code, code.to_string()));
        let users: std::collections::BTreeSet<String> = r
            .deletions
            .iter()
            .map(|d| d.name.to_string())
            .chain(r.upsertions.iter().map(|u| u.name.to_string()))
            .collect();
        return AlterUserScramCredentialsResponse::default()
            .with_results(users.iter().map(|u| result(u, refused())).collect());
    }
    // Kafka's order: deletions, then upsertions; a user seen twice fails as a whole.
    let mut changes: BTreeMap<String, Change> = BTreeMap::new();
    let mut errors: BTreeMap<String, (ResponseError, String)> = BTreeMap::new();
    let twice = || {
        (
            ResponseError::DuplicateResource,
            "A user credential cannot be altered twice in the same request".to_string(),
        )
    };
    for d in r.deletions {
        let user = d.name.to_string();
        if errors.contains_key(&user) {
            continue;
        }
        if changes.remove(&user).is_some() {
            errors.insert(user, twice());
            continue;
        }
        match validate_user_and_mechanism(&user, d.mechanism) {
            Ok(hash) => {
                changes.insert(user, Change::Delete(hash));
            }
            Err(e) => {
                errors.insert(user, e);
            }
        }
    }
    for u in r.upsertions {
        let user = u.name.to_string();
        if errors.contains_key(&user) {
            continue;
        }
        if changes.remove(&user).is_some() {
            errors.insert(user, twice());
            continue;
        }
        let checked = validate_user_and_mechanism(&user, u.mechanism).and_then(|hash| {
            let iterations = u32::try_from(u.iterations).unwrap_or(0);
            if iterations < ScramHash::ITERATIONS_MIN {
                return Err((
                    ResponseError::UnacceptableCredential,
                    "Too few iterations".into(),
                ));
            }
            if iterations > ScramHash::ITERATIONS_MAX {
                return Err((
                    ResponseError::UnacceptableCredential,
                    "Too many iterations".into(),
                ));
            }
            if u.salt.is_empty() || u.salt.len() > SALT_BYTES_MAX {
                return Err((
                    ResponseError::UnacceptableCredential,
                    format!("The salt must be 1 to {SALT_BYTES_MAX} bytes"),
                ));
            }
            if u.salted_password.is_empty() || u.salted_password.len() > SALTED_PASSWORD_BYTES_MAX {
                return Err((
                    ResponseError::UnacceptableCredential,
                    format!("The salted password must be 1 to {SALTED_PASSWORD_BYTES_MAX} bytes"),
                ));
            }
            Ok(Change::Upsert(
                hash,
                ScramEntry::from_salted_password(
                    hash,
                    u.salt.to_vec(),
                    &u.salted_password,
                    iterations,
                ),
            ))
        });
        match checked {
            Ok(change) => {
                changes.insert(user, change);
            }
            Err(e) => {
                errors.insert(user, e);
            }
        }
    }
    let mut results = Vec::new();
    for (user, change) in changes {
        let outcome = apply(broker, &user, change).await;
        results.push(result(&user, outcome.err()));
    }
    for (user, e) in errors {
        results.push(result(&user, Some(e)));
    }
    AlterUserScramCredentialsResponse::default().with_results(results)
}

fn result(user: &str, error: Option<(ResponseError, String)>) -> AlterUserScramCredentialsResult {
    let r = AlterUserScramCredentialsResult::default().with_user(super::str_bytes(user));
    match error {
        None => r,
        Some((code, message)) => r
            .with_error_code(code.code())
            .with_error_message(Some(super::str_bytes(&message))),
    }
}

fn validate_user_and_mechanism(
    user: &str,
    mechanism: i8,
) -> Result<ScramHash, (ResponseError, String)> {
    let hash = ScramHash::from_type_id(mechanism).ok_or((
        ResponseError::UnsupportedSaslMechanism,
        "Unknown SCRAM mechanism".to_string(),
    ))?;
    if user.is_empty() {
        return Err((
            ResponseError::UnacceptableCredential,
            "Username must not be empty".into(),
        ));
    }
    Ok(hash)
}

/// The user's credentials and record version in this broker's cache.
fn read(broker: &Broker, user: &str) -> Result<Option<(UserCredentials, i64)>, String> {
    let Some(record) = broker.security.get(SecurityKind::ScramCredential, user) else {
        return Ok(None);
    };
    match UserCredentials::decode(&record.value) {
        Ok(c) => Ok(Some((c, record.version))),
        Err(why) => {
            tracing::error!(user, %why, "the stored SCRAM credential record is unreadable");
            Err(format!(
                "the stored credential record of {user} is unreadable"
            ))
        }
    }
}

/// Applies one user's change by compare-and-swap, re-reading on a conflict.
async fn apply(broker: &Broker, user: &str, change: Change) -> Result<(), (ResponseError, String)> {
    let kind = SecurityKind::ScramCredential;
    for _ in 0..CAS_ATTEMPTS {
        // An unreadable record is replaced by an upsert (it is what repairs it).
        let (mut creds, version) = match read(broker, user) {
            Ok(Some((c, v))) => (c, Some(v)),
            Ok(None) => (UserCredentials::default(), None),
            Err(why) => match &change {
                Change::Upsert(..) => (
                    UserCredentials::default(),
                    broker.security.get(kind, user).map(|r| r.version),
                ),
                Change::Delete(_) => return Err((ResponseError::UnknownServerError, why)),
            },
        };
        match &change {
            Change::Delete(hash) => {
                if creds.get(*hash).is_none() {
                    return Err((
                        ResponseError::ResourceNotFound,
                        "Attempt to delete a user credential that does not exist".into(),
                    ));
                }
                creds.set(*hash, None);
            }
            Change::Upsert(hash, entry) => creds.set(*hash, Some(entry.clone())),
        }
        let written = if creds.is_empty() {
            broker
                .metadata
                .delete_security_record(kind, user, version)
                .await
                .map(|()| SecurityEvent::Deleted {
                    kind,
                    name: user.to_string(),
                })
        } else {
            let value = creds.encode();
            broker
                .metadata
                .put_security_record(kind, user, value.clone(), version)
                .await
                .map(|version| {
                    SecurityEvent::Put(SecurityRecord {
                        kind,
                        name: user.to_string(),
                        value,
                        version,
                    })
                })
        };
        match written {
            Ok(event) => {
                broker.security.apply(event);
                return Ok(());
            }
            Err(e) if e.kind() == oxbow_metadata::ErrorKind::Conflict => {
                // Another alter won: read the record afresh from the store.
                refresh(broker, user).await;
            }
            Err(e) => {
                let e = BrokerError::from(e);
                tracing::warn!(user, error = %e, "writing a SCRAM credential failed");
                return Err((e.mapped().kafka, e.to_string()));
            }
        }
    }
    Err((
        ResponseError::RequestTimedOut,
        format!("the credentials of {user} changed concurrently {CAS_ATTEMPTS} times; retry"),
    ))
}

/// Brings the cache's copy of one user's record up to the store's.
async fn refresh(broker: &Broker, user: &str) {
    let kind = SecurityKind::ScramCredential;
    match broker.metadata.security_records(kind).await {
        Ok(records) => match records.into_iter().find(|r| r.name == user) {
            Some(r) => broker.security.apply(SecurityEvent::Put(r)),
            None => broker.security.apply(SecurityEvent::Deleted {
                kind,
                name: user.to_string(),
            }),
        },
        Err(e) => tracing::debug!(user, error = %e, "re-reading SCRAM credentials failed"),
    }
}
