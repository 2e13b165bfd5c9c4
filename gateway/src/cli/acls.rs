//! `oxbow acls add|list|remove`, after Kafka's `kafka-acls.sh`.
//!
//! - `add (--allow-principal P | --deny-principal P)... --operation OP... RESOURCE`: one
//!   binding per principal × operation × resource; `--producer` / `--consumer` expand to
//!   Kafka's sets (WRITE, DESCRIBE, CREATE on topics; READ, DESCRIBE on topics and READ on
//!   groups).
//! - `list [RESOURCE] [--principal P]`: one binding per line,
//!   `TYPE PATTERN NAME PRINCIPAL HOST OPERATION PERMISSION`, column-aligned.
//! - `remove ...`: the same selection as `add` (or a broader one with `--operation any`,
//!   no principal), prints what was removed.
//!
//! RESOURCE is any of `--topic T`, `--group G`, `--transactional-id T`, `--cluster`
//! (repeatable), with `--resource-pattern-type literal|prefixed` (`any`/`match` too for
//! list and remove). The broker must run with `--authorizer acl`, and the caller needs
//! ALTER (add, remove) or DESCRIBE (list) on the cluster, e.g. as a `--super-users`
//! principal. The pure part (flags to bindings and filters, the table) is unit-tested here.

use anyhow::{bail, Context};
use std::io::Write;

use super::ConnectArgs;
use crate::security::acl::model::{
    AccessControlEntry, AclBinding, AclBindingFilter, AclOperation, AclPermissionType, EntryFilter,
    PatternType, ResourcePattern, ResourcePatternFilter, ResourceType, CLUSTER_NAME,
};
use crate::security::Principal;

/// `oxbow acls ...`
#[derive(Debug, clap::Args)]
pub struct AclsArgs {
    #[command(flatten)]
    pub connect: ConnectArgs,

    #[command(subcommand)]
    pub command: AclsCommand,
}

/// What to do with ACLs.
#[derive(Debug, clap::Subcommand)]
pub enum AclsCommand {
    /// Add ACL bindings.
    Add(Selection),
    /// List ACL bindings, one per line.
    List(Selection),
    /// Remove the ACL bindings the flags select.
    Remove(Selection),
}

/// The bindings a command names (Kafka's `kafka-acls.sh` flags).
#[derive(Debug, clap::Args)]
pub struct Selection {
    /// Principal to allow, `User:name` (`User:*` for everyone); repeatable.
    #[arg(long = "allow-principal")]
    pub allow_principal: Vec<String>,
    /// Principal to deny; repeatable.
    #[arg(long = "deny-principal")]
    pub deny_principal: Vec<String>,
    /// Filter of `list`: bindings of this principal only.
    #[arg(long)]
    pub principal: Option<String>,
    /// Host the bindings apply to (an IP address; `*`: every host).
    #[arg(long, default_value = "*")]
    pub host: String,
    /// Operation: read, write, create, delete, alter, describe, cluster-action,
    /// describe-configs, alter-configs, idempotent-write, all (any: remove only); repeatable.
    #[arg(long = "operation", value_parser = parse_operation)]
    pub operations: Vec<AclOperation>,
    /// Topic (`*`: every topic); repeatable.
    #[arg(long = "topic")]
    pub topics: Vec<String>,
    /// Consumer group (`*`: every group); repeatable.
    #[arg(long = "group")]
    pub groups: Vec<String>,
    /// Transactional id; repeatable.
    #[arg(long = "transactional-id")]
    pub transactional_ids: Vec<String>,
    /// The cluster resource.
    #[arg(long)]
    pub cluster: bool,
    /// How resource names match: literal, prefixed (any and match: list/remove only).
    #[arg(long = "resource-pattern-type", value_parser = parse_pattern_type, default_value = "literal")]
    pub pattern_type: PatternType,
    /// Producer convenience: WRITE, DESCRIBE and CREATE on the topics.
    #[arg(long)]
    pub producer: bool,
    /// Consumer convenience: READ and DESCRIBE on the topics, READ on the groups.
    #[arg(long)]
    pub consumer: bool,
}

fn parse_operation(s: &str) -> Result<AclOperation, String> {
    match AclOperation::parse(s) {
        Some(AclOperation::Unknown) | None => Err(format!("'{s}' is not an ACL operation")),
        Some(op) => Ok(op),
    }
}

fn parse_pattern_type(s: &str) -> Result<PatternType, String> {
    match PatternType::parse(s) {
        Some(PatternType::Unknown) | None => Err(format!(
            "'{s}' is not a pattern type (literal, prefixed, any, match)"
        )),
        Some(p) => Ok(p),
    }
}

impl Selection {
    /// (type, name) of every resource named.
    fn resources(&self) -> Vec<(ResourceType, String)> {
        let mut out: Vec<(ResourceType, String)> = Vec::new();
        out.extend(self.topics.iter().map(|t| (ResourceType::Topic, t.clone())));
        out.extend(self.groups.iter().map(|g| (ResourceType::Group, g.clone())));
        out.extend(
            self.transactional_ids
                .iter()
                .map(|t| (ResourceType::TransactionalId, t.clone())),
        );
        if self.cluster {
            out.push((ResourceType::Cluster, CLUSTER_NAME.to_string()));
        }
        out
    }

    /// The operations per resource type: `--operation`s, or the convenience sets.
    fn operations_for(&self, rt: ResourceType) -> Vec<AclOperation> {
        let mut ops = Vec::new();
        if self.producer && rt == ResourceType::Topic {
            ops.extend([
                AclOperation::Write,
                AclOperation::Describe,
                AclOperation::Create,
            ]);
        }
        if self.consumer && rt == ResourceType::Topic {
            ops.extend([AclOperation::Read, AclOperation::Describe]);
        }
        if self.consumer && rt == ResourceType::Group {
            ops.push(AclOperation::Read);
        }
        if !self.producer && !self.consumer {
            ops.extend(self.operations.iter().copied());
        }
        ops.sort();
        ops.dedup();
        ops
    }

    fn principals(&self) -> anyhow::Result<Vec<(String, AclPermissionType)>> {
        let mut out = Vec::new();
        for (list, perm) in [
            (&self.allow_principal, AclPermissionType::Allow),
            (&self.deny_principal, AclPermissionType::Deny),
        ] {
            for p in list {
                p.parse::<Principal>()?;
                out.push((p.clone(), perm));
            }
        }
        Ok(out)
    }

    /// The bindings `add` creates.
    pub fn bindings(&self) -> anyhow::Result<Vec<AclBinding>> {
        if !matches!(
            self.pattern_type,
            PatternType::Literal | PatternType::Prefixed
        ) {
            bail!("--resource-pattern-type must be literal or prefixed to add ACLs");
        }
        if self.producer && self.consumer {
            // Allowed by Kafka's tool; kept apart here so each line says what it grants.
            bail!("give --producer or --consumer, not both");
        }
        if self
            .deny_principal
            .iter()
            .any(|_| self.producer || self.consumer)
        {
            bail!("--producer and --consumer grant, they cannot be used with --deny-principal");
        }
        let principals = self.principals()?;
        if principals.is_empty() {
            bail!("name a principal with --allow-principal or --deny-principal");
        }
        let resources = self.resources();
        if resources.is_empty() {
            bail!("name a resource: --topic, --group, --transactional-id or --cluster");
        }
        let mut out = Vec::new();
        for (rt, name) in &resources {
            let ops = self.operations_for(*rt);
            if ops.is_empty() && !(self.producer || self.consumer) {
                bail!("name an operation with --operation (or use --producer / --consumer)");
            }
            for op in ops {
                if op == AclOperation::Any {
                    bail!("--operation any selects, it cannot be added");
                }
                for (principal, perm) in &principals {
                    out.push(AclBinding {
                        pattern: ResourcePattern::new(*rt, name.clone(), self.pattern_type),
                        entry: AccessControlEntry {
                            principal: principal.clone(),
                            host: self.host.clone(),
                            operation: op,
                            permission_type: *perm,
                        },
                    });
                }
            }
        }
        Ok(out)
    }

    /// The filters `list` and `remove` send: one per resource × principal × operation
    /// named, a field left out matching anything.
    pub fn filters(&self, for_remove: bool) -> anyhow::Result<Vec<AclBindingFilter>> {
        let mut principals: Vec<(Option<String>, AclPermissionType)> = self
            .principals()?
            .into_iter()
            .map(|(p, perm)| (Some(p), perm))
            .collect();
        if let Some(p) = &self.principal {
            p.parse::<Principal>()?;
            principals.push((Some(p.clone()), AclPermissionType::Any));
        }
        if principals.is_empty() {
            principals.push((None, AclPermissionType::Any));
        }
        let resources: Vec<(ResourceType, Option<String>)> = match self.resources() {
            r if r.is_empty() && for_remove => {
                bail!("name a resource to remove ACLs of: --topic, --group, --transactional-id or --cluster")
            }
            r if r.is_empty() => vec![(ResourceType::Any, None)],
            r => r.into_iter().map(|(t, n)| (t, Some(n))).collect(),
        };
        let host = (self.host != "*" || for_remove).then(|| self.host.clone());
        let mut out = Vec::new();
        for (rt, name) in &resources {
            let mut ops = self.operations_for(*rt);
            if ops.is_empty() {
                ops.push(AclOperation::Any);
            }
            for op in ops {
                for (principal, perm) in &principals {
                    out.push(AclBindingFilter {
                        pattern: ResourcePatternFilter {
                            resource_type: *rt,
                            name: name.clone(),
                            pattern_type: if name.is_none() {
                                PatternType::Any
                            } else {
                                self.pattern_type
                            },
                        },
                        entry: EntryFilter {
                            principal: principal.clone(),
                            host: if principal.is_some() {
                                host.clone()
                            } else {
                                None
                            },
                            operation: op,
                            permission_type: *perm,
                        },
                    });
                }
            }
        }
        Ok(out)
    }
}

/// One line per binding, column-aligned, sorted.
pub fn table(bindings: &[AclBinding]) -> String {
    let mut rows: Vec<[String; 7]> = vec![[
        "TYPE".into(),
        "PATTERN".into(),
        "NAME".into(),
        "PRINCIPAL".into(),
        "HOST".into(),
        "OPERATION".into(),
        "PERMISSION".into(),
    ]];
    let mut sorted = bindings.to_vec();
    sorted.sort();
    sorted.dedup();
    for b in sorted {
        rows.push([
            b.pattern.resource_type.name().into(),
            b.pattern.pattern_type.name().into(),
            b.pattern.name,
            b.entry.principal,
            b.entry.host,
            b.entry.operation.name().into(),
            b.entry.permission_type.name().into(),
        ]);
    }
    let widths: Vec<usize> = (0..7)
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for r in rows {
        let line: Vec<String> = r
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    out
}

pub async fn run(args: AclsArgs) -> anyhow::Result<()> {
    let mut client = args.connect.connect().await?;
    let mut stdout = std::io::stdout().lock();
    match args.command {
        AclsCommand::Add(sel) => {
            let bindings = sel.bindings()?;
            client.create_acls(&bindings).await.context("adding ACLs")?;
            write!(stdout, "{}", table(&bindings))?;
        }
        AclsCommand::List(sel) => {
            let mut all = Vec::new();
            for f in sel.filters(false)? {
                all.extend(client.describe_acls(&f).await.context("listing ACLs")?);
            }
            write!(stdout, "{}", table(&all))?;
        }
        AclsCommand::Remove(sel) => {
            let mut removed = Vec::new();
            for f in sel.filters(true)? {
                removed.extend(client.delete_acls(&f).await.context("removing ACLs")?);
            }
            write!(stdout, "{}", table(&removed))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        sel: Selection,
    }

    fn sel(args: &[&str]) -> Selection {
        let mut argv = vec!["acls"];
        argv.extend_from_slice(args);
        Cli::try_parse_from(argv).expect("parses").sel
    }

    #[test]
    fn add_expands_principals_operations_and_resources() {
        let b = sel(&[
            "--allow-principal",
            "User:a",
            "--allow-principal",
            "User:b",
            "--operation",
            "read",
            "--operation",
            "Describe",
            "--topic",
            "t",
        ])
        .bindings()
        .expect("bindings");
        assert_eq!(b.len(), 4);
        assert!(b
            .iter()
            .all(|b| b.pattern.name == "t" && b.entry.host == "*"));
        let b = sel(&[
            "--allow-principal",
            "User:c",
            "--consumer",
            "--topic",
            "t",
            "--group",
            "g",
        ])
        .bindings()
        .expect("consumer");
        let ops: Vec<_> = b
            .iter()
            .map(|b| (b.pattern.resource_type, b.entry.operation))
            .collect();
        assert_eq!(
            ops,
            [
                (ResourceType::Topic, AclOperation::Read),
                (ResourceType::Topic, AclOperation::Describe),
                (ResourceType::Group, AclOperation::Read),
            ]
        );
        let b = sel(&[
            "--deny-principal",
            "User:d",
            "--operation",
            "write",
            "--topic",
            "pay",
            "--resource-pattern-type",
            "prefixed",
        ])
        .bindings()
        .expect("deny");
        assert_eq!(b[0].pattern.pattern_type, PatternType::Prefixed);
        assert_eq!(b[0].entry.permission_type, AclPermissionType::Deny);
        let cluster = sel(&[
            "--allow-principal",
            "User:ops",
            "--operation",
            "alter",
            "--cluster",
        ])
        .bindings()
        .expect("cluster");
        assert_eq!(cluster[0].pattern.name, CLUSTER_NAME);
    }

    #[test]
    fn add_refuses_what_cannot_be_a_binding() {
        for bad in [
            &["--operation", "read", "--topic", "t"][..],
            &[
                "--allow-principal",
                "alice",
                "--operation",
                "read",
                "--topic",
                "t",
            ],
            &["--allow-principal", "User:a", "--topic", "t"],
            &["--allow-principal", "User:a", "--operation", "read"],
            &[
                "--allow-principal",
                "User:a",
                "--operation",
                "any",
                "--topic",
                "t",
            ],
            &["--deny-principal", "User:a", "--producer", "--topic", "t"],
            &[
                "--allow-principal",
                "User:a",
                "--operation",
                "read",
                "--topic",
                "t",
                "--resource-pattern-type",
                "match",
            ],
        ] {
            assert!(sel(bad).bindings().is_err(), "{bad:?}");
        }
        let mut argv = vec!["acls", "--operation", "frobnicate"];
        argv.push("--topic");
        assert!(Cli::try_parse_from(argv).is_err());
    }

    #[test]
    fn list_and_remove_filters() {
        let all = sel(&[]).filters(false).expect("list all");
        assert_eq!(all, vec![AclBindingFilter::any()]);
        assert!(sel(&[]).filters(true).is_err(), "remove needs a resource");
        let f = sel(&["--topic", "t", "--principal", "User:a"])
            .filters(false)
            .expect("filter");
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].pattern.resource_type, ResourceType::Topic);
        assert_eq!(f[0].pattern.name.as_deref(), Some("t"));
        assert_eq!(f[0].entry.principal.as_deref(), Some("User:a"));
        assert_eq!(f[0].entry.operation, AclOperation::Any);
        let t = table(
            &sel(&[
                "--allow-principal",
                "User:a",
                "--operation",
                "read",
                "--topic",
                "t",
            ])
            .bindings()
            .expect("b"),
        );
        assert_eq!(
            t.lines()
                .nth(1)
                .map(|l| l.split_whitespace().collect::<Vec<_>>()),
            Some(vec![
                "TOPIC", "LITERAL", "t", "User:a", "*", "READ", "ALLOW"
            ])
        );
    }
}
