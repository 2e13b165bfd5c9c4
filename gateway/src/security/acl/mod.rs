//! Kafka ACL authorization (issue 15): who may do what to which resource.
//!
//! # Layout
//! - [`model`]: the vocabulary with Kafka's names and wire codes; bindings and filters.
//! - [`authorizer`]: the decision (Kafka's `StandardAuthorizer`), over an index of the
//!   security cache rebuilt when the cache changes.
//! - [`store`]: how bindings are kept in the metadata service (one record per resource
//!   pattern) and changed (compare-and-swap).
//!
//! Lifecycle: the broker builds one [`Authorizer`] from `--authorizer`, `--super-users` and
//! `--allow-everyone-if-no-acl-found`; handlers ask `Broker::authz` for a view of it for
//! the request's session and check each resource against that view.

pub mod authorizer;
pub mod model;
pub mod store;

use crate::security::Session;
pub use authorizer::{
    parse_super_users, Authorizer, AuthorizerKind, AuthorizerSettings, AuthzView,
};
pub use model::{AclOperation, ResourceType, CLUSTER_NAME};

/// The authorization flags of `oxbow serve` (Kafka's broker configs of the same names).
#[derive(Clone, Debug, clap::Args)]
pub struct AuthorizationArgs {
    /// Authorizer: `none` allows every request (as Kafka without `authorizer.class.name`);
    /// `acl` enforces Kafka ACLs kept in the metadata service.
    #[arg(long, env = "OXBOW_AUTHORIZER", value_enum, default_value_t = AuthorizerKind::None)]
    pub authorizer: AuthorizerKind,
    /// Principals allowed everything, separated by `;` (Kafka `super.users`), e.g.
    /// `User:admin;User:ops`. Needed to write the first ACLs.
    #[arg(long, env = "OXBOW_SUPER_USERS", default_value = "")]
    pub super_users: String,
    /// Allow a request on a resource no ACL names at all (Kafka
    /// `allow.everyone.if.no.acl.found`). Off: what nobody wrote ACLs for is closed.
    #[arg(long, env = "OXBOW_ALLOW_EVERYONE_IF_NO_ACL_FOUND", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub allow_everyone_if_no_acl_found: bool,
}

impl AuthorizationArgs {
    /// The settings, or a message naming the bad flag.
    pub fn settings(&self) -> Result<AuthorizerSettings, String> {
        let super_users = parse_super_users(&self.super_users)?;
        if self.authorizer == AuthorizerKind::None
            && (!super_users.is_empty() || self.allow_everyone_if_no_acl_found)
        {
            return Err(
                "--super-users and --allow-everyone-if-no-acl-found need --authorizer acl".into(),
            );
        }
        Ok(AuthorizerSettings {
            kind: self.authorizer,
            super_users,
            allow_everyone_if_no_acl_found: self.allow_everyone_if_no_acl_found,
        })
    }
}

/// Where a handler asks: the broker's authorizer over its watched security records.
impl crate::broker::Broker {
    /// The authorization entry point: a view of the ACLs for one request's session, against
    /// which a handler checks every resource it touches (`view.allows(op, type, name)`;
    /// many checks share one index, no I/O). With `--authorizer none` it allows all.
    pub fn authz(&self, session: &Session) -> AuthzView {
        self.authorizer.view(
            &self.security,
            &session.principal,
            &session.peer.ip().to_canonical().to_string(),
        )
    }

    /// One check: may the session do `op` on the resource?
    pub fn authorize(
        &self,
        session: &Session,
        op: AclOperation,
        resource_type: ResourceType,
        name: &str,
    ) -> bool {
        self.authz(session).allows(op, resource_type, name)
    }
}
