//! Authorization of the HTTP API (`--authorizer acl`). Every request is checked as the
//! principal [`super::authn`] found (`User:ANONYMOUS` without `--http-authentication` or a
//! client certificate), from its peer address, against the same ACLs and with the same
//! operations as the Kafka API it stands for:
//!
//! | route | needs |
//! |-------|-------|
//! | `GET /topics/{t}…`, `GET /v3/…/topics/{t}` | DESCRIBE topic |
//! | `POST /topics/{t}[/partitions/{p}]` | WRITE topic (+ CREATE on cluster or topic to auto-create it) |
//! | `GET /topics/{t}/partitions/{p}/records` | READ topic |
//! | `DELETE /v3/…/topics/{t}` | DELETE on the cluster, or DESCRIBE and DELETE topic |
//! | `GET /v3/…/topics/{t}/configs…` | DESCRIBE_CONFIGS topic |
//! | `PUT`/`DELETE /v3/…/configs/{n}`, `POST …/configs:alter` | ALTER_CONFIGS topic |
//! | `POST /v3/…/topics` | CREATE on cluster or topic (checked by the handler: the name is in the body) |
//! | `/consumers/{g}…` | READ group (+ READ topic to subscribe, assign and at every poll: the handlers) |
//! | `GET /v3/…/brokers[/{b}]` | DESCRIBE cluster |
//! | `GET /v3/…/links[/{l}[/mirrors]]` | DESCRIBE cluster |
//! | `POST`/`DELETE /v3/…/links…` (create, pause, resume, delete, promote) | ALTER cluster |
//! | `GET /v3/…/consumer-groups/{g}[/…]` | DESCRIBE group (lags: partitions of topics it may not DESCRIBE are left out, by the handler) |
//!
//! Lists (`GET /topics`, `GET /v3/…/topics`, `GET /v3/…/consumer-groups`) leave out what
//! the client may not describe. `/healthz`, `/readyz`, `/metrics`, the cluster routes and
//! the console's static files (`/ui…`, which hold no data: the page reads it through the
//! routes above, as the viewer) stay open. A refusal
//! is 403 with REST Proxy's `error_code` 40301.
//!
//! The route middleware ([`check`]) does the path-only checks and leaves the request's
//! [`Session`] in its extensions for the handlers that check what the body names.

use super::error::ApiError;
use super::AppState;
use crate::broker::Broker;
use crate::security::acl::{AclOperation, ResourceType, CLUSTER_NAME};
use crate::security::{Principal, SecurityProtocol, Session};
use axum::extract::{MatchedPath, RawPathParams, Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::RequestPartsExt;
use std::net::SocketAddr;

/// The peer of an HTTP connection, put in every request's extensions by the listener.
#[derive(Clone, Copy, Debug)]
pub struct PeerAddr(pub SocketAddr);

/// The listener name HTTP sessions carry.
const HTTP_LISTENER: &str = "HTTP";

/// The session of an HTTP request: anonymous, from its peer.
pub fn session_of(peer: Option<PeerAddr>) -> Session {
    session_for(peer, Principal::anonymous(), SecurityProtocol::Plaintext)
}

/// The session of an HTTP request from `peer` authenticated as `principal`.
pub fn session_for(
    peer: Option<PeerAddr>,
    principal: Principal,
    protocol: SecurityProtocol,
) -> Session {
    Session {
        peer: peer
            .map(|p| p.0)
            .unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], 0))),
        listener: HTTP_LISTENER.into(),
        protocol,
        principal,
    }
}

/// The session the route middleware left for the handler (anonymous without a peer if a
/// test router skipped the middleware).
pub fn session_or_anonymous(session: Option<axum::Extension<Session>>) -> Session {
    session.map(|s| s.0).unwrap_or_else(|| session_of(None))
}

/// 403/40301 unless the session may do `op` on the resource.
pub fn require(
    broker: &Broker,
    session: &Session,
    op: AclOperation,
    rt: ResourceType,
    name: &str,
) -> Result<(), ApiError> {
    if broker.authorize(session, op, rt, name) {
        return Ok(());
    }
    Err(ApiError::forbidden(
        rt,
        format!(
            "{} is not authorized to {op} {rt} '{name}'",
            session.principal
        ),
    ))
}

/// 403/40301 unless the session may read every topic named.
pub fn require_read<'a>(
    broker: &Broker,
    session: Option<axum::Extension<Session>>,
    topics: impl IntoIterator<Item = &'a String>,
) -> Result<(), ApiError> {
    if !broker.authorizer.enabled() {
        return Ok(());
    }
    let session = session_or_anonymous(session);
    topics
        .into_iter()
        .try_for_each(|t| require(broker, &session, AclOperation::Read, ResourceType::Topic, t))
}

/// 403 unless the session may create the topic (CREATE on the cluster or on it).
pub fn require_create(broker: &Broker, session: &Session, topic: &str) -> Result<(), ApiError> {
    let authz = broker.authz(session);
    if authz.allows(AclOperation::Create, ResourceType::Cluster, CLUSTER_NAME)
        || authz.allows(AclOperation::Create, ResourceType::Topic, topic)
    {
        return Ok(());
    }
    Err(ApiError::forbidden(
        ResourceType::Topic,
        format!(
            "{} is not authorized to CREATE topic '{topic}'",
            session.principal
        ),
    ))
}

/// What one route needs, from its path and method alone.
fn path_checks(
    broker: &Broker,
    session: &Session,
    route: &str,
    method: &Method,
    param: impl Fn(&str) -> Option<String>,
) -> Result<(), ApiError> {
    use AclOperation as Op;
    use ResourceType::{Group, Topic};
    if route.starts_with("/consumers/") {
        if let Some(g) = param("group") {
            require(broker, session, Op::Read, Group, &g)?;
        }
        return Ok(());
    }
    if route.starts_with("/v3/clusters/{cluster}/brokers") {
        return require(
            broker,
            session,
            Op::Describe,
            ResourceType::Cluster,
            CLUSTER_NAME,
        );
    }
    if route.starts_with("/v3/clusters/{cluster}/links") {
        // Cluster links (issue 20): a link reaches another cluster with the credentials it
        // holds and rewrites topics here, so changing one is ALTER on the cluster, as
        // Kafka's broker-level admin operations; reading is DESCRIBE on the cluster.
        let op = if method == Method::GET {
            Op::Describe
        } else {
            Op::Alter
        };
        return require(broker, session, op, ResourceType::Cluster, CLUSTER_NAME);
    }
    if route.starts_with("/v3/clusters/{cluster}/consumer-groups/") {
        if let Some(g) = param("group") {
            return require(broker, session, Op::Describe, Group, &g);
        }
        return Ok(());
    }
    let Some(topic) = param("topic") else {
        return Ok(());
    };
    let v3 = route.starts_with("/v3/");
    if route.contains("/configs") {
        let op = if method == Method::GET {
            Op::DescribeConfigs
        } else {
            Op::AlterConfigs
        };
        return require(broker, session, op, Topic, &topic);
    }
    if route.ends_with("/records") {
        return require(broker, session, Op::Read, Topic, &topic);
    }
    match *method {
        Method::POST if !v3 => {
            require(broker, session, Op::Write, Topic, &topic)?;
            if broker.topic(&topic).is_none() && broker.settings.auto_create_topics {
                require_create(broker, session, &topic)?;
            }
            Ok(())
        }
        Method::DELETE if v3 => {
            // As DeleteTopics: DELETE on the cluster covers every topic.
            if broker.authorize(session, Op::Delete, ResourceType::Cluster, CLUSTER_NAME) {
                return Ok(());
            }
            require(broker, session, Op::Describe, Topic, &topic)?;
            require(broker, session, Op::Delete, Topic, &topic)
        }
        _ => require(broker, session, Op::Describe, Topic, &topic),
    }
}

/// The route middleware: the path-only checks, then the session for the handler. The
/// session is the one authentication left (anonymous from the peer if none did).
pub(crate) async fn check(State(app): State<AppState>, request: Request, next: Next) -> Response {
    let broker = app.http.broker.clone();
    let session = request
        .extensions()
        .get::<Session>()
        .cloned()
        .unwrap_or_else(|| session_of(request.extensions().get::<PeerAddr>().copied()));
    if broker.authorizer.enabled() {
        let (mut parts, body) = request.into_parts();
        let route = parts
            .extensions
            .get::<MatchedPath>()
            .map(|m| m.as_str().to_string())
            .unwrap_or_default();
        // A path that is not UTF-8 is refused by the handler's own extractor.
        let params: Vec<(String, String)> = match parts.extract::<RawPathParams>().await {
            Ok(p) => p
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            Err(_) => Vec::new(),
        };
        let param = |name: &str| {
            params
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        };
        if let Err(e) = path_checks(&broker, &session, &route, &parts.method, param) {
            return e.into_response();
        }
        let mut request = Request::from_parts(parts, body);
        request.extensions_mut().insert(session);
        return next.run(request).await;
    }
    let mut request = request;
    request.extensions_mut().insert(session);
    next.run(request).await
}
