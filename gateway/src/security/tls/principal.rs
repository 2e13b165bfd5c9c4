//! The principal of an mTLS client: its certificate's subject DN written as Kafka writes it,
//! then Kafka's `ssl.principal.mapping.rules` (`--ssl-principal-mapping-rules`). Pure: no
//! I/O, fed a certificate's DER by the handshake.
//!
//! Kafka's `DefaultKafkaPrincipalBuilder` names an SSL client `User:` + the mapped
//! `X500Principal.getName()`, Java's RFC 2253 form: RDNs last to first, `,` between them,
//! `+` between the attributes of a multi-valued RDN (in their DER order), the keywords
//! CN C L ST O OU STREET DC UID, any other attribute as its dotted OID with `#` and the hex
//! of its DER value, and `,=+<>#;"\` escaped with `\` (a leading or trailing space too).
//! The expected strings in the tests below were printed by Java for the same certificates.

use x509_parser::asn1_rs::{Any, Tag, ToDer};
use x509_parser::prelude::{FromDer, X509Certificate, X509Name};

/// The subject DN of a DER certificate in Java's RFC 2253 form.
pub fn subject_dn(cert_der: &[u8]) -> Result<String, String> {
    let (_, cert) = X509Certificate::from_der(cert_der)
        .map_err(|e| format!("the client certificate does not parse: {e}"))?;
    Ok(rfc2253(cert.subject()))
}

/// `name` in Java's `X500Principal.getName()` (RFC 2253) form.
pub fn rfc2253(name: &X509Name<'_>) -> String {
    let rdns: Vec<String> = name
        .iter_rdn()
        .map(|rdn| {
            rdn.iter()
                .map(|atv| attribute(&atv.attr_type().to_id_string(), atv.attr_value()))
                .collect::<Vec<_>>()
                .join("+")
        })
        .collect();
    rdns.into_iter().rev().collect::<Vec<_>>().join(",")
}

/// RFC 2253's keywords (Java prints only these by name, every other type as an OID).
fn keyword(oid: &str) -> Option<&'static str> {
    Some(match oid {
        "2.5.4.3" => "CN",
        "2.5.4.6" => "C",
        "2.5.4.7" => "L",
        "2.5.4.8" => "ST",
        "2.5.4.10" => "O",
        "2.5.4.11" => "OU",
        "2.5.4.9" => "STREET",
        "0.9.2342.19200300.100.1.25" => "DC",
        "0.9.2342.19200300.100.1.1" => "UID",
        _ => return None,
    })
}

fn attribute(oid: &str, value: &Any<'_>) -> String {
    let text = keyword(oid).and_then(|k| directory_string(value).map(|v| (k, v)));
    match text {
        Some((k, v)) => format!("{k}={}", escape(&v)),
        None => {
            let name = keyword(oid).unwrap_or(oid);
            let der = value.to_der_vec().unwrap_or_default();
            let hex: String = der.iter().map(|b| format!("{b:02x}")).collect();
            format!("{name}=#{hex}")
        }
    }
}

/// The value as text, for the string types Java prints as text (others print as hex).
fn directory_string(value: &Any<'_>) -> Option<String> {
    let data = value.data;
    Some(match value.tag() {
        Tag::Utf8String => String::from_utf8_lossy(data).into_owned(),
        Tag::PrintableString | Tag::Ia5String => data
            .iter()
            .map(|&b| {
                if b.is_ascii() {
                    char::from(b)
                } else {
                    '\u{fffd}'
                }
            })
            .collect(),
        // Java decodes these as ISO-8859-1.
        Tag::T61String | Tag::GeneralString => data.iter().map(|&b| char::from(b)).collect(),
        Tag::BmpString => {
            let units: Vec<u16> = data
                .chunks(2)
                .map(|c| u16::from_be_bytes([c[0], c.get(1).copied().unwrap_or(0)]))
                .collect();
            String::from_utf16_lossy(&units)
        }
        _ => return None,
    })
}

/// RFC 2253 escaping as Java does it.
fn escape(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            ',' | '=' | '+' | '<' | '>' | '#' | ';' | '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            '\0' => out.push_str("\\00"),
            c => out.push(c),
        }
    }
    let chars: Vec<char> = out.chars().collect();
    let blank = |c: &char| *c == ' ' || *c == '\r';
    let lead = chars.iter().take_while(|c| blank(c)).count();
    let trail = chars.iter().rev().take_while(|c| blank(c)).count();
    if lead == 0 && trail == 0 {
        return out;
    }
    let mut escaped = String::with_capacity(out.len() + lead + trail);
    for (i, c) in chars.iter().enumerate() {
        if i < lead || i >= chars.len().saturating_sub(trail) {
            escaped.push('\\');
        }
        escaped.push(*c);
    }
    escaped
}

/// One of Kafka's `ssl.principal.mapping.rules`.
#[derive(Clone, Debug)]
enum Rule {
    /// The DN unchanged.
    Default,
    /// `RULE:pattern/replacement/[LU]`: applies if `pattern` matches the whole DN.
    Replace {
        whole: regex::Regex,
        pattern: regex::Regex,
        replacement: String,
        case: Case,
    },
}

#[derive(Clone, Copy, Debug)]
enum Case {
    Keep,
    Lower,
    Upper,
}

/// `--ssl-principal-mapping-rules`, Kafka's `ssl.principal.mapping.rules`: rules separated
/// by `,` or newlines, the first that matches the DN names the principal; a DN no rule
/// matches is refused (the handshake's connection is closed), as in Kafka.
#[derive(Clone, Debug)]
pub struct PrincipalMapper {
    rules: Vec<Rule>,
}

impl Default for PrincipalMapper {
    fn default() -> Self {
        PrincipalMapper {
            rules: vec![Rule::Default],
        }
    }
}

/// Reads up to an unescaped `/`; returns the part (escapes kept) and the rest after `/`.
fn until_slash(s: &str) -> Option<(&str, &str)> {
    let mut escaped = false;
    for (i, c) in s.char_indices() {
        match c {
            '\\' if !escaped => escaped = true,
            '/' if !escaped => return Some((&s[..i], &s[i + 1..])),
            _ => escaped = false,
        }
    }
    None
}

/// A Java `replaceAll` replacement in the regex crate's syntax: `$1` is group 1 however
/// the text goes on (the regex crate would read `$1_x` as a group named `1_x`), `\$` and
/// `\\` are a literal `$` and `\`.
fn java_replacement(java: &str) -> String {
    let mut out = String::with_capacity(java.len() + 8);
    let mut chars = java.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some('$') => out.push_str("$$"),
                Some(other) => out.push(other),
                None => out.push('\\'),
            },
            '$' if chars.peek().is_some_and(|d| d.is_ascii_digit()) => {
                out.push_str("${");
                while let Some(d) = chars.peek().copied().filter(char::is_ascii_digit) {
                    out.push(d);
                    chars.next();
                }
                out.push('}');
            }
            '$' => out.push_str("$$"),
            c => out.push(c),
        }
    }
    out
}

impl PrincipalMapper {
    /// Parses the rules; an error names the flag and the rule.
    pub fn parse(rules: &str) -> Result<Self, String> {
        const FLAG: &str = "--ssl-principal-mapping-rules";
        let mut out = Vec::new();
        let mut rest = rules.trim_start();
        while !rest.is_empty() {
            if let Some(after) = rest.strip_prefix("DEFAULT") {
                out.push(Rule::Default);
                rest = after;
            } else if let Some(after) = rest.strip_prefix("RULE:") {
                let bad = || format!("{FLAG}: '{rest}' is not RULE:pattern/replacement/[LU]");
                let (pattern, after) = until_slash(after).ok_or_else(bad)?;
                let (replacement, after) = until_slash(after).ok_or_else(bad)?;
                let (case, after) = match after.chars().next() {
                    Some('L') => (Case::Lower, &after[1..]),
                    Some('U') => (Case::Upper, &after[1..]),
                    _ => (Case::Keep, after),
                };
                let compile = |p: &str| {
                    regex::Regex::new(p).map_err(|e| format!("{FLAG}: pattern '{pattern}': {e}"))
                };
                out.push(Rule::Replace {
                    whole: compile(&format!("^(?:{pattern})$"))?,
                    pattern: compile(pattern)?,
                    replacement: java_replacement(&replacement.replace("\\/", "/")),
                    case,
                });
                rest = after;
            } else {
                return Err(format!(
                    "{FLAG}: '{rest}' is neither DEFAULT nor RULE:pattern/replacement/[LU]"
                ));
            }
            rest = rest.trim_start_matches([' ', '\t']);
            match rest.chars().next() {
                None => {}
                Some(',' | '\n' | '\r') => rest = rest[1..].trim_start(),
                Some(_) => return Err(format!("{FLAG}: expected ',' before '{rest}'")),
            }
        }
        if out.is_empty() {
            return Err(format!("{FLAG}: no rule (DEFAULT keeps the DN)"));
        }
        Ok(PrincipalMapper { rules: out })
    }

    /// The principal name for `dn`, or `None` if no rule matches.
    pub fn map(&self, dn: &str) -> Option<String> {
        self.rules.iter().find_map(|rule| match rule {
            Rule::Default => Some(dn.to_string()),
            Rule::Replace {
                whole,
                pattern,
                replacement,
                case,
            } => whole.is_match(dn).then(|| {
                let name = pattern.replace_all(dn, replacement.as_str());
                match case {
                    Case::Keep => name.into_owned(),
                    Case::Lower => name.to_lowercase(),
                    Case::Upper => name.to_uppercase(),
                }
            }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::CertificateDer;

    fn dn_of(pem: &str) -> String {
        let der = CertificateDer::from_pem_slice(pem.as_bytes()).expect("pem");
        subject_dn(&der).expect("dn")
    }

    #[test]
    fn subject_dns_print_as_java_prints_them() {
        // Each expectation is Java's X500Principal.getName() of the same file.
        assert_eq!(
            dn_of(include_str!("testdata/dn_simple.pem")),
            "CN=alice,OU=eng,O=acme,C=US"
        );
        assert_eq!(
            dn_of(include_str!("testdata/dn_tricky.pem")),
            "ST=ZH,L=Zürich,STREET=Main St,2.5.4.5=#13023432,CN=\\ lead and trail\\ ,\
             OU=x+UID=u1,O=a\\,b,1.2.840.113549.1.9.1=#16056140622e63,DC=example,DC=com"
        );
        assert_eq!(
            dn_of(include_str!("testdata/dn_escapes.pem")),
            "CN=\\#x,O=a\\,b\\+c\\=d\\;e\\<f\\>g\\#h\\\"j\\\\k"
        );
        assert!(subject_dn(b"\x30\x03\x02\x01\x00").is_err());
    }

    #[test]
    fn mapping_rules_follow_kafka() {
        let dn = "CN=alice,OU=ServiceUsers,O=acme,C=US";
        assert_eq!(PrincipalMapper::default().map(dn).as_deref(), Some(dn));
        let m = PrincipalMapper::parse(
            "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/U, RULE:^CN=([^,]*),O=(.*)$/$1@$2/L,\nDEFAULT",
        )
        .expect("rules");
        assert_eq!(m.map(dn).as_deref(), Some("ALICE"));
        assert_eq!(m.map("CN=Bob,O=Acme").as_deref(), Some("bob@acme"));
        assert_eq!(m.map("OU=x").as_deref(), Some("OU=x"));
        // Escaped slashes, and a DN that no rule matches.
        let m = PrincipalMapper::parse(r"RULE:^CN=([^\/]*)\/x$/a\/$1/").expect("rule");
        assert_eq!(m.map("CN=b/x").as_deref(), Some("a/b"));
        assert_eq!(m.map("CN=b"), None);
        // Java's replacement syntax: `$1` followed by name characters, a literal `$`.
        let m = PrincipalMapper::parse(r"RULE:^CN=([^,]*),O=(.*)$/$1_$2\$x/").expect("rule");
        assert_eq!(m.map("CN=a,O=b").as_deref(), Some("a_b$x"));
        for bad in [
            "",
            "RULE:x",
            "RULE:x/y",
            "RULE:(/x/",
            "DEFAULT DEFAULT",
            "NOPE",
        ] {
            let e = PrincipalMapper::parse(bad).expect_err(bad);
            assert!(e.contains("--ssl-principal-mapping-rules"), "{e}");
        }
    }
}
