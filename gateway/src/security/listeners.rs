//! Kafka listeners: `--listeners`, `--advertised-listeners`,
//! `--listener-security-protocol-map` and `--inter-broker-listener-name`, with Kafka's
//! syntax and rules (`NAME://host:port`, names mapped to a security protocol, the four
//! protocol names mapping to themselves by default).
//!
//! Without `--listeners` the broker has one listener, `PLAINTEXT://{--kafka-addr}`,
//! advertised as `--advertised-kafka-addr` — what it had before listeners existed.
//! Parsing is pure ([`plan`]); binding and advertising the bound port is the server's.

use super::SecurityProtocol;
use std::collections::BTreeMap;
use std::net::SocketAddr;

/// Flags of `oxbow serve` for the Kafka listeners.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct ListenerArgs {
    /// Kafka's `listeners`: comma-separated `NAME://host:port` the Kafka protocol listens
    /// on, e.g. `INTERNAL://10.0.0.5:9092,CLIENT://0.0.0.0:9093`; each name's protocol
    /// comes from --listener-security-protocol-map. Replaces --kafka-addr.
    #[arg(long, env = "OXBOW_LISTENERS")]
    pub listeners: Option<String>,
    /// Kafka's `advertised.listeners`: `NAME://host:port` clients of each listener are told
    /// to connect to (a listener not named here advertises its bound address).
    #[arg(long, env = "OXBOW_ADVERTISED_LISTENERS")]
    pub advertised_listeners: Option<String>,
    /// Kafka's `listener.security.protocol.map`: `NAME:PROTOCOL,...` (PLAINTEXT, SSL,
    /// SASL_PLAINTEXT, SASL_SSL). Listeners named after a protocol need no entry.
    #[arg(long, env = "OXBOW_LISTENER_SECURITY_PROTOCOL_MAP")]
    pub listener_security_protocol_map: Option<String>,
    /// Kafka's `inter.broker.listener.name`: the listener other brokers and the controller
    /// reach this one on (forwarded produces, health probes). Default: the first listener.
    #[arg(long, env = "OXBOW_INTER_BROKER_LISTENER_NAME")]
    pub inter_broker_listener_name: Option<String>,
}

/// One listener to bind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListenerSpec {
    /// Upper case, as Kafka normalises listener names.
    pub name: String,
    pub protocol: SecurityProtocol,
    pub bind: SocketAddr,
    /// `host:port` to advertise; `None`: the bound address.
    pub advertised: Option<(String, i32)>,
}

/// Every listener, in the order given, and which one brokers use among themselves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListenerPlan {
    pub listeners: Vec<ListenerSpec>,
    pub inter_broker: String,
}

/// Splits `NAME://host:port` (host may be empty: every interface, or `[v6]`).
fn split_endpoint(flag: &str, endpoint: &str) -> Result<(String, String, u16), String> {
    let (name, rest) = endpoint
        .split_once("://")
        .ok_or_else(|| format!("{flag}: '{endpoint}' is not NAME://host:port"))?;
    let name = name.trim().to_ascii_uppercase();
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        return Err(format!(
            "{flag}: listener name '{name}' must be letters, digits, '_' or '-'"
        ));
    }
    let (host, port) = rest
        .rsplit_once(':')
        .ok_or_else(|| format!("{flag}: '{endpoint}' has no :port"))?;
    let port: u16 = port
        .parse()
        .map_err(|_| format!("{flag}: '{endpoint}': port '{port}' is not a number"))?;
    Ok((name, host.trim_matches(['[', ']']).to_string(), port))
}

fn entries(list: &str) -> impl Iterator<Item = &str> {
    list.split(',').map(str::trim).filter(|e| !e.is_empty())
}

/// The protocol map: Kafka's default (each protocol name to itself) plus `map`.
fn protocol_map(map: Option<&str>) -> Result<BTreeMap<String, SecurityProtocol>, String> {
    let mut out: BTreeMap<String, SecurityProtocol> = [
        SecurityProtocol::Plaintext,
        SecurityProtocol::Ssl,
        SecurityProtocol::SaslPlaintext,
        SecurityProtocol::SaslSsl,
    ]
    .into_iter()
    .map(|p| (p.name().to_string(), p))
    .collect();
    for entry in entries(map.unwrap_or("")) {
        let (name, protocol) = entry.split_once(':').ok_or_else(|| {
            format!("--listener-security-protocol-map: '{entry}' is not NAME:PROTOCOL")
        })?;
        let protocol = protocol
            .trim()
            .parse()
            .map_err(|e| format!("--listener-security-protocol-map: {e}"))?;
        out.insert(name.trim().to_ascii_uppercase(), protocol);
    }
    Ok(out)
}

/// The listeners the flags describe. `kafka_addr`/`advertised_kafka_addr` are used only
/// without `--listeners`.
pub fn plan(
    args: &ListenerArgs,
    kafka_addr: SocketAddr,
    advertised_kafka_addr: Option<&str>,
) -> Result<ListenerPlan, String> {
    let protocols = protocol_map(args.listener_security_protocol_map.as_deref())?;
    let mut listeners = Vec::new();
    match &args.listeners {
        None => {
            let advertised = advertised_kafka_addr
                .map(|a| {
                    let (_, host, port) =
                        split_endpoint("--advertised-kafka-addr", &format!("PLAINTEXT://{a}"))?;
                    Ok::<_, String>((host, i32::from(port)))
                })
                .transpose()?;
            listeners.push(ListenerSpec {
                name: SecurityProtocol::Plaintext.name().to_string(),
                protocol: SecurityProtocol::Plaintext,
                bind: kafka_addr,
                advertised,
            });
        }
        Some(list) => {
            if advertised_kafka_addr.is_some() {
                return Err("--advertised-kafka-addr applies to --kafka-addr only; with --listeners use --advertised-listeners".into());
            }
            for entry in entries(list) {
                let (name, host, port) = split_endpoint("--listeners", entry)?;
                let protocol = *protocols.get(&name).ok_or_else(|| {
                    format!("--listeners: listener '{name}' has no security protocol; add {name}:PROTOCOL to --listener-security-protocol-map")
                })?;
                let ip = if host.is_empty() {
                    std::net::IpAddr::from([0, 0, 0, 0])
                } else {
                    host.parse().map_err(|_| {
                        format!("--listeners: '{entry}': '{host}' is not an IP address to bind")
                    })?
                };
                if listeners.iter().any(|l: &ListenerSpec| l.name == name) {
                    return Err(format!("--listeners: listener '{name}' is given twice"));
                }
                listeners.push(ListenerSpec {
                    name,
                    protocol,
                    bind: SocketAddr::new(ip, port),
                    advertised: None,
                });
            }
            if listeners.is_empty() {
                return Err("--listeners names no listener".into());
            }
        }
    }
    for entry in entries(args.advertised_listeners.as_deref().unwrap_or("")) {
        let (name, host, port) = split_endpoint("--advertised-listeners", entry)?;
        let listener = listeners
            .iter_mut()
            .find(|l| l.name == name)
            .ok_or_else(|| format!("--advertised-listeners: '{name}' is not one of --listeners"))?;
        if host.is_empty() || port == 0 {
            return Err(format!(
                "--advertised-listeners: '{entry}' needs a host and a port clients can reach"
            ));
        }
        listener.advertised = Some((host, i32::from(port)));
    }
    let inter_broker = match &args.inter_broker_listener_name {
        Some(n) => {
            let n = n.trim().to_ascii_uppercase();
            if !listeners.iter().any(|l| l.name == n) {
                return Err(format!(
                    "--inter-broker-listener-name: '{n}' is not one of --listeners"
                ));
            }
            n
        }
        None => listeners[0].name.clone(),
    };
    Ok(ListenerPlan {
        listeners,
        inter_broker,
    })
}

/// The address to advertise for `spec` once bound at `bound`.
pub fn advertised(spec: &ListenerSpec, bound: SocketAddr) -> Result<(String, i32), String> {
    match &spec.advertised {
        Some(a) => Ok(a.clone()),
        None if bound.ip().is_unspecified() => Err(format!(
            "listener {} listens on every interface ({bound}); set --advertised-listeners (or --advertised-kafka-addr) to the host:port clients should use",
            spec.name
        )),
        None => Ok((bound.ip().to_string(), i32::from(bound.port()))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(listeners: Option<&str>, advertised: Option<&str>, map: Option<&str>) -> ListenerArgs {
        ListenerArgs {
            listeners: listeners.map(String::from),
            advertised_listeners: advertised.map(String::from),
            listener_security_protocol_map: map.map(String::from),
            inter_broker_listener_name: None,
        }
    }

    const KAFKA: &str = "127.0.0.1:9092";

    #[test]
    fn without_listeners_the_kafka_addr_is_one_plaintext_listener() {
        let p = plan(
            &args(None, None, None),
            KAFKA.parse().expect("addr"),
            Some("h:1"),
        )
        .expect("plan");
        assert_eq!(p.inter_broker, "PLAINTEXT");
        assert_eq!(p.listeners.len(), 1);
        assert_eq!(p.listeners[0].protocol, SecurityProtocol::Plaintext);
        assert_eq!(p.listeners[0].advertised, Some(("h".into(), 1)));
    }

    #[test]
    fn listeners_take_protocols_from_the_map_and_defaults() {
        let a = args(
            Some("internal://127.0.0.1:9092, SASL_SSL://:9093,CLIENT://[::1]:9094"),
            Some("SASL_SSL://broker-1.example:443"),
            Some("INTERNAL:PLAINTEXT,client:ssl"),
        );
        let p = plan(&a, KAFKA.parse().expect("addr"), None).expect("plan");
        let got: Vec<_> = p
            .listeners
            .iter()
            .map(|l| (l.name.as_str(), l.protocol, l.bind.to_string()))
            .collect();
        assert_eq!(
            got,
            [
                (
                    "INTERNAL",
                    SecurityProtocol::Plaintext,
                    "127.0.0.1:9092".to_string()
                ),
                (
                    "SASL_SSL",
                    SecurityProtocol::SaslSsl,
                    "0.0.0.0:9093".to_string()
                ),
                ("CLIENT", SecurityProtocol::Ssl, "[::1]:9094".to_string()),
            ]
        );
        assert_eq!(p.inter_broker, "INTERNAL");
        assert_eq!(
            p.listeners[1].advertised,
            Some(("broker-1.example".into(), 443))
        );
        // Every interface and nothing advertised: clients could not be told where to go.
        assert!(advertised(&p.listeners[1], "0.0.0.0:9093".parse().expect("a")).is_ok());
        let mut bare = p.listeners[1].clone();
        bare.advertised = None;
        assert!(advertised(&bare, "0.0.0.0:9093".parse().expect("a")).is_err());
        assert_eq!(
            advertised(&p.listeners[0], "127.0.0.1:40000".parse().expect("a")),
            Ok(("127.0.0.1".into(), 40000))
        );
    }

    #[test]
    fn bad_listener_flags_name_the_flag() {
        let addr: SocketAddr = KAFKA.parse().expect("addr");
        for (a, adv, flag) in [
            (
                args(Some("CLIENT://127.0.0.1:1"), None, None),
                None,
                "--listener-security-protocol-map",
            ),
            (
                args(Some("PLAINTEXT://127.0.0.1"), None, None),
                None,
                "--listeners",
            ),
            (
                args(Some("PLAINTEXT://localhost:1"), None, None),
                None,
                "--listeners",
            ),
            (
                args(
                    Some("PLAINTEXT://127.0.0.1:1,PLAINTEXT://127.0.0.1:2"),
                    None,
                    None,
                ),
                None,
                "--listeners",
            ),
            (
                args(Some("PLAINTEXT://127.0.0.1:1"), Some("SSL://h:1"), None),
                None,
                "--advertised-listeners",
            ),
            (
                args(Some("PLAINTEXT://127.0.0.1:1"), None, Some("X:TLS")),
                None,
                "--listener-security-protocol-map",
            ),
            (
                args(Some("PLAINTEXT://127.0.0.1:1"), None, None),
                Some("h:1"),
                "--advertised-kafka-addr",
            ),
            (args(Some(" , "), None, None), None, "--listeners"),
        ] {
            let e = plan(&a, addr, adv).expect_err("refused");
            assert!(e.contains(flag), "{e} should name {flag}");
        }
        let mut a = args(
            Some("A://127.0.0.1:1,B://127.0.0.1:2"),
            None,
            Some("A:PLAINTEXT,B:SSL"),
        );
        a.inter_broker_listener_name = Some("C".into());
        assert!(plan(&a, addr, None)
            .expect_err("unknown")
            .contains("--inter-broker-listener-name"));
        a.inter_broker_listener_name = Some("b".into());
        assert_eq!(plan(&a, addr, None).expect("plan").inter_broker, "B");
    }
}
