use super::*;
use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::signature::{EcdsaKeyPair, KeyPair, ECDSA_P256_SHA256_FIXED_SIGNING};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use jsonwebtoken::{EncodingKey, Header};
use serde_json::json;

/// A generated P-256 key: its signing key and its JWK.
pub(crate) struct Key {
    encoding: EncodingKey,
    jwk: serde_json::Value,
}

pub(crate) fn key(kid: &str) -> Key {
    let rng = SystemRandom::new();
    let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).expect("key");
    let pair =
        EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref()).expect("pair");
    let point = pair.public_key().as_ref();
    assert_eq!(point.len(), 65, "uncompressed point");
    Key {
        encoding: EncodingKey::from_ec_der(pkcs8.as_ref()),
        jwk: json!({
            "kty": "EC", "crv": "P-256", "use": "sig", "alg": "ES256", "kid": kid,
            "x": URL_SAFE_NO_PAD.encode(&point[1..33]),
            "y": URL_SAFE_NO_PAD.encode(&point[33..]),
        }),
    }
}

pub(crate) fn jwks(keys: &[&Key]) -> Jwks {
    let doc = json!({ "keys": keys.iter().map(|k| k.jwk.clone()).collect::<Vec<_>>() });
    Jwks::parse(doc.to_string().as_bytes()).expect("jwks")
}

pub(crate) fn sign(key: &Key, kid: Option<&str>, claims: serde_json::Value) -> String {
    let mut header = Header::new(Algorithm::ES256);
    header.kid = kid.map(str::to_string);
    jsonwebtoken::encode(&header, &claims, &key.encoding).expect("sign")
}

pub(crate) fn settings() -> OauthSettings {
    OauthSettings {
        jwks: JwksSource::File("unused".into()),
        expected_audience: vec!["oxbow".into()],
        expected_issuer: Some("https://issuer.example".into()),
        sub_claim: "sub".into(),
        clock_skew: Duration::from_secs(30),
        refresh: Duration::from_secs(3600),
    }
}

pub(crate) const NOW: u64 = 1_800_000_000;

pub(crate) fn good_claims() -> serde_json::Value {
    json!({ "sub": "alice", "aud": "oxbow", "iss": "https://issuer.example",
            "iat": NOW - 10, "exp": NOW + 600 })
}

#[test]
fn a_signed_token_with_good_claims_names_its_subject() {
    let k = key("k1");
    let v = validate_with(
        &jwks(&[&k]),
        &settings(),
        &sign(&k, Some("k1"), good_claims()),
        NOW,
    )
    .expect("valid");
    assert_eq!(v.subject, "alice");
    assert_eq!(v.expires_at_ms, ((NOW + 600) * 1000) as i64);
}

#[test]
fn forged_expired_and_misaddressed_tokens_are_refused() {
    let k = key("k1");
    let other = key("k1"); // same key id, another key: a forgery
    let set = jwks(&[&k]);
    let s = settings();
    let with = |f: &dyn Fn(&mut serde_json::Value)| {
        let mut c = good_claims();
        f(&mut c);
        sign(&k, Some("k1"), c)
    };
    let cases: Vec<(&str, String)> = vec![
        ("forged", sign(&other, Some("k1"), good_claims())),
        ("expired", with(&|c| c["exp"] = json!(NOW - 31))),
        (
            "no exp",
            with(&|c| {
                c.as_object_mut().map(|o| o.remove("exp"));
            }),
        ),
        ("future nbf", with(&|c| c["nbf"] = json!(NOW + 120))),
        (
            "wrong audience",
            with(&|c| c["aud"] = json!("someone-else")),
        ),
        (
            "wrong issuer",
            with(&|c| c["iss"] = json!("https://evil.example")),
        ),
        ("no subject", with(&|c| c["sub"] = json!(""))),
        ("unknown kid", sign(&k, Some("k9"), good_claims())),
        ("garbage", "not.a.jwt".to_string()),
    ];
    for (what, token) in cases {
        assert!(
            validate_with(&set, &s, &token, NOW).is_err(),
            "{what} accepted"
        );
    }
    // Within the skew an expired token still passes, as in Kafka.
    assert!(validate_with(&set, &s, &with(&|c| c["exp"] = json!(NOW - 5)), NOW).is_ok());
}

#[test]
fn unsigned_and_symmetric_tokens_are_refused() {
    let k = key("k1");
    let set = jwks(&[&k]);
    // alg "none": header {"alg":"none"} with an empty signature.
    let body = URL_SAFE_NO_PAD.encode(good_claims().to_string());
    let none = format!(
        "{}.{body}.",
        URL_SAFE_NO_PAD.encode(r#"{"alg":"none","kid":"k1"}"#)
    );
    assert!(validate_with(&set, &settings(), &none, NOW).is_err());
    let hs = jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        &good_claims(),
        &EncodingKey::from_secret(b"guessable"),
    )
    .expect("hs256");
    assert!(matches!(
        validate_with(&set, &settings(), &hs, NOW),
        Err(TokenError::Algorithm(Algorithm::HS256))
    ));
}

#[test]
fn a_token_without_kid_needs_a_set_of_one_key() {
    let (a, b) = (key("a"), key("b"));
    let token = sign(&a, None, good_claims());
    assert!(validate_with(&jwks(&[&a]), &settings(), &token, NOW).is_ok());
    assert!(validate_with(&jwks(&[&a, &b]), &settings(), &token, NOW).is_err());
}

#[test]
fn client_responses_parse_as_rfc_7628_says() {
    let (t, a) = parse_client_response(b"n,,\x01auth=Bearer abc.def.ghi\x01\x01").expect("ok");
    assert_eq!((t.as_str(), a), ("abc.def.ghi", None));
    let (_, a) =
        parse_client_response(b"n,a=al=2Cice,\x01host=x\x01auth=Bearer t\x01\x01").expect("ok");
    assert_eq!(a.as_deref(), Some("al,ice"));
    for bad in [
        &b""[..],
        b"n,,",
        b"y,,\x01auth=Bearer t\x01\x01",
        b"n,,\x01auth=Basic t\x01\x01",
        b"n,,\x01auth=Bearer t\x01",
        b"n,,\x01host=x\x01\x01",
        b"n,,\x01auth=Bearer a\x01auth=Bearer b\x01\x01",
        b"\xff\xfe",
    ] {
        assert!(parse_client_response(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn key_sets_are_bounded_and_need_a_signature_key() {
    assert!(Jwks::parse(b"{\"keys\":[]}").is_err());
    assert!(Jwks::parse(b"not json").is_err());
    assert!(Jwks::parse(&vec![b' '; JWKS_BYTES_MAX + 1]).is_err());
    let k = key("k");
    let mut enc = k.jwk.clone();
    enc["use"] = json!("enc");
    assert!(Jwks::parse(json!({ "keys": [enc] }).to_string().as_bytes()).is_err());
    let many: Vec<_> = (0..JWKS_KEYS_MAX + 5).map(|_| k.jwk.clone()).collect();
    let set = Jwks::parse(json!({ "keys": many }).to_string().as_bytes()).expect("set");
    assert_eq!(set.len(), JWKS_KEYS_MAX);
}

#[test]
fn jwks_sources_take_files_and_urls() {
    assert_eq!(
        "file:///etc/jwks.json".parse::<JwksSource>(),
        Ok(JwksSource::File("/etc/jwks.json".into()))
    );
    assert_eq!(
        "https://idp/keys".parse::<JwksSource>(),
        Ok(JwksSource::Url("https://idp/keys".into()))
    );
    assert!("ftp://x".parse::<JwksSource>().is_err());
}
