//! SCRAM credential admin on [`Client`]: DescribeUserScramCredentials and
//! AlterUserScramCredentials (KIP-554), as Kafka's `Admin.describeUserScramCredentials` /
//! `alterUserScramCredentials` send them. The password never leaves this process: the
//! client sends Hi(password, salt, iterations), as Kafka's admin client does.

use bytes::Bytes;
use kafka_protocol::messages::alter_user_scram_credentials_request::{
    ScramCredentialDeletion, ScramCredentialUpsertion,
};
use kafka_protocol::messages::describe_user_scram_credentials_request::UserName;
use kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, DescribeUserScramCredentialsRequest,
};
use kafka_protocol::protocol::StrBytes;

use super::error::ClientError;
use super::kafka_client::{Client, Target};

/// One user's SCRAM credentials as described: (Kafka mechanism type id, iterations).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserScramCredentials {
    pub user: String,
    pub credentials: Vec<(i8, i32)>,
}

/// One change of AlterUserScramCredentials.
pub enum ScramChange {
    /// Set the credential of (user, mechanism type id).
    Upsert {
        user: String,
        mechanism: i8,
        iterations: i32,
        salt: Vec<u8>,
        salted_password: Vec<u8>,
    },
    /// Remove the credential of (user, mechanism type id).
    Delete { user: String, mechanism: i8 },
}

impl Client {
    /// The SCRAM credentials of `users` (every user when empty).
    pub async fn describe_user_scram_credentials(
        &mut self,
        users: &[String],
    ) -> Result<Vec<UserScramCredentials>, ClientError> {
        let names = (!users.is_empty()).then(|| {
            users
                .iter()
                .map(|u| UserName::default().with_name(StrBytes::from_string(u.clone())))
                .collect()
        });
        let (_, response) = self
            .call(Target::Any, None, std::time::Duration::ZERO, |_| {
                DescribeUserScramCredentialsRequest::default().with_users(names)
            })
            .await?;
        ClientError::check(
            response.error_code,
            response.error_message.as_deref(),
            || "describe SCRAM credentials".to_string(),
        )?;
        let mut out = Vec::new();
        for r in response.results {
            let user = r.user.to_string();
            ClientError::check(r.error_code, r.error_message.as_deref(), || {
                format!("describe SCRAM credentials of user \"{user}\"")
            })?;
            out.push(UserScramCredentials {
                user,
                credentials: r
                    .credential_infos
                    .iter()
                    .map(|c| (c.mechanism, c.iterations))
                    .collect(),
            });
        }
        out.sort_by(|a, b| a.user.cmp(&b.user));
        Ok(out)
    }

    /// Applies `changes` (at most one per user, as Kafka requires); the first failure is
    /// the error.
    pub async fn alter_user_scram_credentials(
        &mut self,
        changes: Vec<ScramChange>,
    ) -> Result<(), ClientError> {
        let mut request = AlterUserScramCredentialsRequest::default();
        for c in changes {
            match c {
                ScramChange::Upsert {
                    user,
                    mechanism,
                    iterations,
                    salt,
                    salted_password,
                } => request.upsertions.push(
                    ScramCredentialUpsertion::default()
                        .with_name(StrBytes::from_string(user))
                        .with_mechanism(mechanism)
                        .with_iterations(iterations)
                        .with_salt(Bytes::from(salt))
                        .with_salted_password(Bytes::from(salted_password)),
                ),
                ScramChange::Delete { user, mechanism } => request.deletions.push(
                    ScramCredentialDeletion::default()
                        .with_name(StrBytes::from_string(user))
                        .with_mechanism(mechanism),
                ),
            }
        }
        let (_, response) = self
            .call(Target::Any, None, std::time::Duration::ZERO, |_| request)
            .await?;
        for r in response.results {
            let user = r.user.to_string();
            ClientError::check(r.error_code, r.error_message.as_deref(), || {
                format!("alter SCRAM credentials of user \"{user}\"")
            })?;
        }
        Ok(())
    }
}
