//! Fixtures come from `tests/fixtures/auth/generate.sh` (openssl only).

use std::path::PathBuf;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use http::{HeaderMap, HeaderValue};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{json, Value};

use super::*;
use crate::model::Sensitivity;

const ISSUER: &str = "https://idp.test";
const AUDIENCE: &str = "compactd";
const API_KEY: &str = "ck_test_0123456789abcdef";

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/auth")
        .join(name)
}

fn read(name: &str) -> Vec<u8> {
    std::fs::read(fixture(name)).expect("fixture")
}

fn now() -> u64 {
    jsonwebtoken::get_current_timestamp()
}

fn jwt_config() -> JwtConfig {
    JwtConfig {
        issuer: ISSUER.into(),
        audience: AUDIENCE.into(),
        jwks_file: Some(fixture("jwks.json")),
        hs256_secret_file: Some(fixture("jwt_hs256.secret")),
        ..Default::default()
    }
}

fn full_config() -> AuthConfig {
    AuthConfig {
        dev: false,
        jwt: Some(jwt_config()),
        api_keys: vec![ApiKeyEntry {
            sha256: hash_api_key(API_KEY),
            tenant: "acme".into(),
            requester: "ci-bot".into(),
            permissions: vec!["compact".into(), "artifact:read:internal".into()],
        }],
        mtls: Some(MtlsConfig {
            ca_file: fixture("ca.pem"),
            cert_file: fixture("server.pem"),
            key_file: fixture("server.key"),
            trust_domain: "compactd.test".into(),
            permissions: vec!["render".into()],
        }),
    }
}

fn auth() -> Authenticator {
    Authenticator::from_config(&full_config()).expect("config")
}

fn claims() -> Value {
    json!({
        "iss": ISSUER,
        "aud": AUDIENCE,
        "sub": "user-42",
        "exp": now() + 600,
        "iat": now(),
        "tenant": "acme",
        "permissions": ["compact", "render", "artifact:read:public"],
    })
}

fn with(mut claims: Value, key: &str, value: Value) -> Value {
    claims[key] = value;
    claims
}

fn without(mut claims: Value, key: &str) -> Value {
    claims.as_object_mut().expect("object").remove(key);
    claims
}

fn sign(alg: Algorithm, kid: Option<&str>, claims: &Value) -> String {
    let key = match alg {
        Algorithm::RS256 => EncodingKey::from_rsa_pem(&read("jwt_rsa.key")).expect("rsa"),
        Algorithm::ES256 => EncodingKey::from_ec_pem(&read("jwt_ec.key")).expect("ec"),
        Algorithm::HS256 => EncodingKey::from_secret(&read("jwt_hs256.secret")),
        other => panic!("no test key for {other:?}"),
    };
    let mut header = Header::new(alg);
    header.kid = kid.map(str::to_owned);
    jsonwebtoken::encode(&header, claims, &key).expect("sign")
}

fn rs256(claims: &Value) -> String {
    sign(Algorithm::RS256, Some("rsa-1"), claims)
}

/// A token with an arbitrary header and signature, for attacks jsonwebtoken refuses to produce.
fn hand_made(header: Value, claims: &Value, signature: &[u8]) -> String {
    let enc = |v: &Value| URL_SAFE_NO_PAD.encode(serde_json::to_vec(v).expect("json"));
    format!(
        "{}.{}.{}",
        enc(&header),
        enc(claims),
        URL_SAFE_NO_PAD.encode(signature)
    )
}

fn bearer(token: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(
        "authorization",
        HeaderValue::from_str(&format!("Bearer {token}")).expect("header"),
    );
    h
}

fn api_key(key: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert("x-api-key", HeaderValue::from_str(key).expect("header"));
    h
}

fn der(name: &str) -> Vec<u8> {
    let (_, pem) = x509_parser::pem::parse_x509_pem(&read(name)).expect("pem");
    pem.contents
}

#[test]
fn jwt_table() {
    let a = auth();
    let hmac_with_public_key = {
        // Key confusion: HMAC keyed with the published RSA key.
        let header = json!({"alg": "HS256", "typ": "JWT", "kid": "rsa-1"});
        let unsigned = hand_made(header.clone(), &claims(), b"");
        let message = unsigned.trim_end_matches('.');
        let mac = hmac_sha256(&read("jwks.json"), message.as_bytes());
        format!("{message}.{}", URL_SAFE_NO_PAD.encode(mac))
    };
    let cases: Vec<(&str, String, Result<&str, AuthError>)> = vec![
        ("valid RS256", rs256(&claims()), Ok("acme")),
        (
            "valid ES256",
            sign(Algorithm::ES256, Some("ec-1"), &claims()),
            Ok("acme"),
        ),
        (
            "valid HS256",
            sign(Algorithm::HS256, None, &claims()),
            Ok("acme"),
        ),
        (
            "expired",
            rs256(&with(claims(), "exp", json!(now() - 3600))),
            Err(AuthError::Expired),
        ),
        (
            "expired within leeway",
            rs256(&with(claims(), "exp", json!(now() - 5))),
            Ok("acme"),
        ),
        (
            "not yet valid",
            rs256(&with(claims(), "nbf", json!(now() + 3600))),
            Err(AuthError::InvalidToken(
                "token is not valid yet (nbf)".into(),
            )),
        ),
        (
            "wrong issuer",
            rs256(&with(claims(), "iss", json!("https://evil.test"))),
            Err(AuthError::WrongIssuer),
        ),
        (
            "wrong audience",
            rs256(&with(claims(), "aud", json!("someone-else"))),
            Err(AuthError::WrongAudience),
        ),
        (
            "audience list containing ours",
            rs256(&with(claims(), "aud", json!(["other", AUDIENCE]))),
            Ok("acme"),
        ),
        (
            "no exp",
            rs256(&without(claims(), "exp")),
            Err(AuthError::InvalidToken("token has no `exp` claim".into())),
        ),
        (
            "no iss",
            rs256(&without(claims(), "iss")),
            Err(AuthError::InvalidToken("token has no `iss` claim".into())),
        ),
        (
            "no aud",
            rs256(&without(claims(), "aud")),
            Err(AuthError::InvalidToken("token has no `aud` claim".into())),
        ),
        (
            "alg none",
            hand_made(json!({"alg": "none", "typ": "JWT"}), &claims(), b""),
            Err(AuthError::AlgorithmNotAllowed("none".into())),
        ),
        (
            "alg None with kid",
            hand_made(json!({"alg": "None", "kid": "rsa-1"}), &claims(), b""),
            Err(AuthError::AlgorithmNotAllowed("None".into())),
        ),
        (
            "HS256 keyed with the public JWKS (no secret configured for it)",
            hmac_with_public_key,
            Err(AuthError::InvalidToken("signature does not verify".into())),
        ),
        (
            "RS256 header on the EC key",
            hand_made(json!({"alg": "RS256", "kid": "ec-1"}), &claims(), b"sig"),
            Err(AuthError::AlgorithmNotAllowed("RS256".into())),
        ),
        (
            "ES256 header on the RSA key",
            sign(Algorithm::ES256, Some("rsa-1"), &claims()),
            Err(AuthError::AlgorithmNotAllowed("ES256".into())),
        ),
        (
            "RS512 is not accepted",
            hand_made(json!({"alg": "RS512", "kid": "rsa-1"}), &claims(), b"sig"),
            Err(AuthError::AlgorithmNotAllowed("RS512".into())),
        ),
        (
            "unknown kid",
            sign(Algorithm::RS256, Some("rsa-2"), &claims()),
            Err(AuthError::UnknownKey),
        ),
        (
            "no kid with a two-key JWKS",
            sign(Algorithm::RS256, None, &claims()),
            Err(AuthError::UnknownKey),
        ),
        (
            "missing tenant claim",
            rs256(&without(claims(), "tenant")),
            Err(AuthError::InvalidToken(
                "token has no `tenant` claim".into(),
            )),
        ),
        (
            "tenant with a path separator",
            rs256(&with(claims(), "tenant", json!("../other"))),
            Err(AuthError::InvalidToken(
                "`tenant` claim is not a valid tenant id ([A-Za-z0-9._-]{1,128})".into(),
            )),
        ),
        (
            "tenant with a space",
            rs256(&with(claims(), "tenant", json!("ac me"))),
            Err(AuthError::InvalidToken(
                "`tenant` claim is not a valid tenant id ([A-Za-z0-9._-]{1,128})".into(),
            )),
        ),
        (
            "tenant not a string",
            rs256(&with(claims(), "tenant", json!(7))),
            Err(AuthError::InvalidToken(
                "`tenant` claim is not a valid tenant id ([A-Za-z0-9._-]{1,128})".into(),
            )),
        ),
        (
            "no sub",
            rs256(&without(claims(), "sub")),
            Err(AuthError::InvalidToken("token has no `sub` claim".into())),
        ),
        (
            "permissions of the wrong type",
            rs256(&with(claims(), "permissions", json!({"compact": true}))),
            Err(AuthError::InvalidToken(
                "`permissions` claim must be an array of strings or a space-separated string"
                    .into(),
            )),
        ),
        (
            "crit header",
            hand_made(
                json!({"alg": "RS256", "kid": "rsa-1", "crit": ["exp"]}),
                &claims(),
                b"x",
            ),
            Err(AuthError::InvalidToken(
                "critical header extensions are not supported".into(),
            )),
        ),
        (
            "two parts",
            "eyJhbGciOiJIUzI1NiJ9.e30".into(),
            Err(AuthError::Malformed(
                "a JWT has three dot-separated parts".into(),
            )),
        ),
        (
            "JWE",
            "a.b.c.d.e".into(),
            Err(AuthError::Malformed(
                "encrypted tokens (JWE) are not supported".into(),
            )),
        ),
        (
            "header not base64",
            "!!!.e30.sig".into(),
            Err(AuthError::Malformed(
                "token header is not base64url JSON".into(),
            )),
        ),
    ];
    for (name, token, want) in cases {
        let got = a.authenticate(&bearer(&token), None);
        match (&got, &want) {
            (Ok(ctx), Ok(tenant)) => {
                assert_eq!(ctx.tenant_id, *tenant, "{name}");
                assert_eq!(ctx.requester_id, "user-42", "{name}");
                assert_eq!(ctx.method, AuthMethod::Jwt, "{name}");
            }
            (Err(e), Err(w)) => {
                assert_eq!(e, w, "{name}");
                assert!(!e.is_permission_denied(), "{name}");
                let msg = e.to_string();
                for part in token.split('.').filter(|p| p.len() > 8) {
                    assert!(
                        !msg.contains(part),
                        "{name}: message echoes the token: {msg}"
                    );
                }
            }
            _ => panic!("{name}: got {got:?}, want {want:?}"),
        }
    }
}

/// HMAC-SHA256 by hand (RFC 2104), so the key-confusion token needs no extra crate.
fn hmac_sha256(key: &[u8], message: &[u8]) -> Vec<u8> {
    use sha2::{Digest, Sha256};
    let mut block = [0u8; 64];
    if key.len() > 64 {
        block[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    let pad = |byte: u8| block.iter().map(|b| b ^ byte).collect::<Vec<u8>>();
    let inner = Sha256::new()
        .chain_update(pad(0x36))
        .chain_update(message)
        .finalize();
    Sha256::new()
        .chain_update(pad(0x5c))
        .chain_update(inner)
        .finalize()
        .to_vec()
}

#[test]
fn hmac_helper_matches_jsonwebtoken() {
    // Guards the key-confusion case above: the hand-made HMAC must be a real one.
    let token = sign(Algorithm::HS256, None, &claims());
    let (message, signature) = token.rsplit_once('.').expect("jwt");
    let mac = hmac_sha256(&read("jwt_hs256.secret"), message.as_bytes());
    assert_eq!(URL_SAFE_NO_PAD.encode(mac), signature);
}

#[test]
fn hs256_against_rs256_only_jwks_is_key_confusion() {
    let config = AuthConfig {
        jwt: Some(JwtConfig {
            hs256_secret_file: None,
            ..jwt_config()
        }),
        ..Default::default()
    };
    let a = Authenticator::from_config(&config).expect("config");
    // Classic attack: HMAC keyed with the public key the server publishes.
    let header = json!({"alg": "HS256", "typ": "JWT", "kid": "rsa-1"});
    let unsigned = hand_made(header, &claims(), b"");
    let message = unsigned.trim_end_matches('.');
    let mac = hmac_sha256(&read("jwks.json"), message.as_bytes());
    let token = format!("{message}.{}", URL_SAFE_NO_PAD.encode(mac));
    assert_eq!(
        a.authenticate(&bearer(&token), None),
        Err(AuthError::AlgorithmNotAllowed("HS256".into()))
    );
    // And a genuine RS256 token still works.
    assert!(a.authenticate(&bearer(&rs256(&claims())), None).is_ok());
}

#[test]
fn one_key_jwks_matches_a_token_without_kid() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut jwks: Value = serde_json::from_slice(&read("jwks.json")).expect("jwks");
    let mut rsa = jwks["keys"][0].clone();
    rsa.as_object_mut().expect("object").remove("kid");
    jwks["keys"] = json!([rsa]);
    let path = dir.path().join("one.json");
    std::fs::write(&path, serde_json::to_vec(&jwks).expect("json")).expect("write");
    let config = AuthConfig {
        jwt: Some(JwtConfig {
            jwks_file: Some(path),
            hs256_secret_file: None,
            ..jwt_config()
        }),
        ..Default::default()
    };
    let a = Authenticator::from_config(&config).expect("config");
    let ctx = a
        .authenticate(&bearer(&sign(Algorithm::RS256, None, &claims())), None)
        .expect("no kid, one key");
    assert_eq!(ctx.tenant_id, "acme");
    // A kid that the key does not carry is still unknown.
    assert_eq!(
        a.authenticate(&bearer(&rs256(&claims())), None),
        Err(AuthError::UnknownKey)
    );
}

#[test]
fn tampered_signature_is_rejected() {
    let token = rs256(&claims());
    let (message, _) = token.rsplit_once('.').expect("jwt");
    let forged = rs256(&with(claims(), "tenant", json!("other")));
    let (_, other_sig) = forged.rsplit_once('.').expect("jwt");
    let spliced = format!("{message}.{other_sig}");
    assert_eq!(
        auth().authenticate(&bearer(&spliced), None),
        Err(AuthError::InvalidToken("signature does not verify".into()))
    );
}

#[test]
fn jwt_permissions_from_array_or_scope_string() {
    let a = auth();
    let ctx = a
        .authenticate(&bearer(&rs256(&claims())), None)
        .expect("ok");
    assert_eq!(
        ctx.permissions,
        [
            Permission::Compact,
            Permission::Render,
            Permission::ArtifactRead(Sensitivity::Public)
        ]
        .into()
    );
    let scoped = with(
        claims(),
        "permissions",
        json!("openid compact  rehydrate email"),
    );
    let ctx = a.authenticate(&bearer(&rs256(&scoped)), None).expect("ok");
    assert_eq!(
        ctx.permissions,
        [Permission::Compact, Permission::Rehydrate].into()
    );
    let none = without(claims(), "permissions");
    let ctx = a.authenticate(&bearer(&rs256(&none)), None).expect("ok");
    assert!(ctx.permissions.is_empty());
    assert!(ctx
        .require(&Permission::Compact)
        .unwrap_err()
        .is_permission_denied());
}

#[test]
fn custom_claim_names() {
    let config = AuthConfig {
        jwt: Some(JwtConfig {
            tenant_claim: "https://compactd.test/org".into(),
            permissions_claim: "scope".into(),
            ..jwt_config()
        }),
        ..Default::default()
    };
    let a = Authenticator::from_config(&config).expect("config");
    let c = json!({
        "iss": ISSUER, "aud": AUDIENCE, "sub": "svc", "exp": now() + 60,
        "https://compactd.test/org": "globex", "scope": "render",
    });
    let ctx = a.authenticate(&bearer(&rs256(&c)), None).expect("ok");
    assert_eq!(ctx.tenant_id, "globex");
    assert_eq!(ctx.permissions, [Permission::Render].into());
}

#[test]
fn authorization_header_shapes() {
    let a = auth();
    let token = rs256(&claims());
    let mut lower = HeaderMap::new();
    lower.insert(
        "authorization",
        HeaderValue::from_str(&format!("bearer {token}")).expect("header"),
    );
    assert!(a.authenticate(&lower, None).is_ok());

    let mut basic = HeaderMap::new();
    basic.insert(
        "authorization",
        HeaderValue::from_static("Basic dXNlcjpwdw=="),
    );
    assert!(matches!(
        a.authenticate(&basic, None),
        Err(AuthError::Malformed(_))
    ));

    let mut empty = HeaderMap::new();
    empty.insert("authorization", HeaderValue::from_static("Bearer "));
    assert!(matches!(
        a.authenticate(&empty, None),
        Err(AuthError::Malformed(_))
    ));

    let mut two = bearer(&token);
    two.append(
        "authorization",
        HeaderValue::from_str(&format!("Bearer {token}")).expect("header"),
    );
    assert_eq!(
        a.authenticate(&two, None),
        Err(AuthError::Malformed(
            "more than one `authorization` header".into()
        ))
    );
}

#[test]
fn api_keys() {
    let a = auth();
    let ctx = a.authenticate(&api_key(API_KEY), None).expect("ok");
    assert_eq!(ctx.tenant_id, "acme");
    assert_eq!(ctx.requester_id, "ci-bot");
    assert_eq!(ctx.method, AuthMethod::ApiKey);
    assert!(ctx.can_read(Sensitivity::Internal));
    assert!(!ctx.can_read(Sensitivity::Confidential));

    let wrong = a.authenticate(&api_key("ck_test_wrong"), None).unwrap_err();
    assert_eq!(wrong, AuthError::InvalidToken("unknown API key".into()));
    assert!(!wrong.to_string().contains("ck_test_wrong"));

    // A server without API keys rejects one instead of falling through to dev mode.
    let dev_only = Authenticator::from_config(&AuthConfig {
        dev: true,
        ..Default::default()
    })
    .expect("config");
    assert!(matches!(
        dev_only.authenticate(&api_key(API_KEY), None),
        Err(AuthError::InvalidToken(_))
    ));
}

#[test]
fn hash_api_key_is_sha256_hex() {
    assert_eq!(
        hash_api_key("abc"),
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
}

#[test]
fn spiffe_client_certificates() {
    let a = auth();
    let ctx = a
        .authenticate(
            &HeaderMap::new(),
            Some(&[der("client_acme.pem"), der("ca.pem")]),
        )
        .expect("ok");
    assert_eq!(ctx.tenant_id, "acme");
    assert_eq!(
        ctx.requester_id,
        "spiffe://compactd.test/tenant/acme/agent/a1"
    );
    assert_eq!(ctx.method, AuthMethod::Mtls);
    assert_eq!(ctx.permissions, [Permission::Render].into());

    assert_eq!(
        a.authenticate(&HeaderMap::new(), Some(&[der("client_other_domain.pem")])),
        Err(AuthError::InvalidToken(
            "SPIFFE trust domain is not accepted".into()
        ))
    );
    assert_eq!(
        a.authenticate(&HeaderMap::new(), Some(&[der("client_no_spiffe.pem")])),
        Err(AuthError::InvalidToken(
            "client certificate has no SPIFFE id".into()
        ))
    );
    assert!(matches!(
        a.authenticate(&HeaderMap::new(), Some(&[b"not a certificate".to_vec()])),
        Err(AuthError::Malformed(_))
    ));
    // An empty chain is no credential at all.
    assert_eq!(
        a.authenticate(&HeaderMap::new(), Some(&[])),
        Err(AuthError::Missing)
    );
}

#[test]
fn spiffe_paths() {
    let v = mtls::SpiffeVerifier::from_config(&full_config().mtls.expect("mtls")).expect("ok");
    let tenant = |id: &str| {
        v.tenant_of(id)
            .map(str::to_owned)
            .map_err(|e| e.to_string())
    };
    assert_eq!(
        tenant("spiffe://compactd.test/tenant/acme").as_deref(),
        Ok("acme")
    );
    assert_eq!(
        tenant("spiffe://compactd.test/tenant/acme/agent/x").as_deref(),
        Ok("acme")
    );
    for bad in [
        "spiffe://compactd.test/",
        "spiffe://compactd.test",
        "spiffe://compactd.test/tenants/acme",
        "spiffe://compactd.test/tenant/",
        "spiffe://compactd.test/tenant/..",
        "spiffe://compactd.test/tenant/acme?x=1",
        "spiffe://compactd.test.evil/tenant/acme",
        "spiffe://evil.test/tenant/acme",
        "spiffe://COMPACTD.TEST/tenant/acme",
    ] {
        assert!(tenant(bad).is_err(), "{bad}");
    }
}

#[test]
fn credential_order_and_dev_mode() {
    let a = auth();
    // Bearer wins over an API key and a client certificate.
    let mut both = bearer(&rs256(&with(claims(), "tenant", json!("from-jwt"))));
    both.insert("x-api-key", HeaderValue::from_static(API_KEY));
    let ctx = a
        .authenticate(&both, Some(&[der("client_acme.pem")]))
        .expect("ok");
    assert_eq!(ctx.tenant_id, "from-jwt");
    // A bad bearer does not fall back to the valid API key.
    let mut bad_then_good = bearer("x.y.z");
    bad_then_good.insert("x-api-key", HeaderValue::from_static(API_KEY));
    assert!(a.authenticate(&bad_then_good, None).is_err());
    // API key wins over the certificate.
    let ctx = a
        .authenticate(&api_key(API_KEY), Some(&[der("client_acme.pem")]))
        .expect("ok");
    assert_eq!(ctx.method, AuthMethod::ApiKey);
    assert_eq!(
        a.authenticate(&HeaderMap::new(), None),
        Err(AuthError::Missing)
    );

    let nothing = Authenticator::from_config(&AuthConfig::default()).expect("config");
    assert!(!nothing.is_configured() && !nothing.is_dev());
    assert_eq!(
        nothing.authenticate(&HeaderMap::new(), None),
        Err(AuthError::Missing)
    );
    assert!(matches!(
        nothing.authenticate(&bearer(&rs256(&claims())), None),
        Err(AuthError::InvalidToken(_))
    ));

    let dev = Authenticator::from_config(&AuthConfig {
        dev: true,
        ..full_config()
    })
    .expect("config");
    assert!(dev.is_dev() && dev.is_configured());
    assert_eq!(
        dev.authenticate(&HeaderMap::new(), None),
        Ok(SecurityContext::dev())
    );
    // Dev mode still verifies a credential that is presented.
    assert_eq!(
        dev.authenticate(&bearer(&rs256(&with(claims(), "iss", json!("x")))), None),
        Err(AuthError::WrongIssuer)
    );
    // Client certificates are ignored when mTLS is not configured.
    let dev_only = Authenticator::from_config(&AuthConfig {
        dev: true,
        ..Default::default()
    })
    .expect("config");
    assert_eq!(
        dev_only.authenticate(&HeaderMap::new(), Some(&[der("client_other_domain.pem")])),
        Ok(SecurityContext::dev())
    );
}

#[test]
fn permission_strings() {
    for p in Permission::all() {
        assert_eq!(p.to_string().parse::<Permission>(), Ok(p.clone()));
    }
    assert_eq!(
        "artifact:read:confidential".parse(),
        Ok(Permission::ArtifactRead(Sensitivity::Confidential))
    );
    assert_eq!(Permission::Rehydrate.to_string(), "rehydrate");
    for bad in [
        "",
        "Compact",
        " compact",
        "artifact:read:",
        "artifact:read:secret",
        "artifact:read:*",
        "artifact:write:public",
    ] {
        assert!(bad.parse::<Permission>().is_err(), "{bad:?}");
    }
    assert_eq!(Permission::all().len(), 8);
}

#[test]
fn security_context_checks() {
    let dev = SecurityContext::dev();
    assert_eq!(dev.tenant_id, "dev");
    assert_eq!(dev.method, AuthMethod::Dev);
    assert!(dev.require(&Permission::Rehydrate).is_ok());
    assert!(dev.can_read(Sensitivity::Restricted));
    assert!(dev.check_body_tenant("").is_ok());
    assert!(dev.check_body_tenant("dev").is_ok());
    let forged = dev.check_body_tenant("acme").unwrap_err();
    assert!(forged.is_permission_denied());
    assert!(!forged.to_string().contains("acme"));

    let limited = SecurityContext {
        permissions: [Permission::Render].into(),
        ..SecurityContext::dev()
    };
    let err = limited.require(&Permission::Compact).unwrap_err();
    assert!(err.is_permission_denied());
    assert!(err.to_string().contains("`compact`"), "{err}");
    assert!(!limited.can_read(Sensitivity::Public));
}

#[test]
fn tenant_ids() {
    for ok in ["acme", "a", "Acme-Corp_1.eu", &"x".repeat(128)] {
        assert!(is_valid_tenant_id(ok), "{ok}");
    }
    for bad in [
        "",
        ".",
        "..",
        "a/b",
        "a\\b",
        "a b",
        "ü",
        "a\0",
        &"x".repeat(129),
    ] {
        assert!(!is_valid_tenant_id(bad), "{bad:?}");
    }
}

#[test]
fn yaml_config() {
    let yaml = r#"
jwt:
  issuer: https://idp.test
  audience: compactd
  jwks_file: /etc/compactd/jwks.json
api_keys:
  - sha256: ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad
    tenant: acme
    requester: ci
    permissions: [compact, render]
"#;
    let c: AuthConfig = serde_norway::from_str(yaml).expect("yaml");
    let jwt = c.jwt.expect("jwt");
    assert_eq!(jwt.tenant_claim, "tenant");
    assert_eq!(jwt.permissions_claim, "permissions");
    assert_eq!(jwt.leeway_seconds, 30);
    assert!(!c.dev && c.mtls.is_none());
    assert_eq!(
        AuthConfig::default(),
        serde_norway::from_str("{}").expect("empty")
    );

    for bad in [
        "bogus: 1",
        "jwt: {issuer: a, audience: b, jwks: x}",
        "jwt: {issuer: a}",
        "api_keys: [{sha256: ab, tenant: t, requester: r, key: k}]",
    ] {
        assert!(serde_norway::from_str::<AuthConfig>(bad).is_err(), "{bad}");
    }
}

#[test]
fn config_errors_name_the_field() {
    let field = |c: AuthConfig| {
        Authenticator::from_config(&c)
            .map(|_| ())
            .map_err(|e| e.field)
    };
    let jwt = |j: JwtConfig| AuthConfig {
        jwt: Some(j),
        ..Default::default()
    };
    assert_eq!(
        field(jwt(JwtConfig {
            jwks_file: None,
            hs256_secret_file: None,
            ..jwt_config()
        })),
        Err("auth.jwt".into())
    );
    assert_eq!(
        field(jwt(JwtConfig {
            jwks_file: Some(fixture("missing.json")),
            ..jwt_config()
        })),
        Err("auth.jwt.jwks_file".into())
    );
    assert_eq!(
        field(jwt(JwtConfig {
            jwks_file: Some(fixture("ca.pem")),
            ..jwt_config()
        })),
        Err("auth.jwt.jwks_file".into())
    );
    assert_eq!(
        field(jwt(JwtConfig {
            issuer: " ".into(),
            ..jwt_config()
        })),
        Err("auth.jwt.issuer".into())
    );
    assert_eq!(
        field(jwt(JwtConfig {
            hs256_secret_env: Some("COMPACTD_TEST_SURELY_UNSET_VAR".into()),
            hs256_secret_file: None,
            ..jwt_config()
        })),
        Err("auth.jwt.hs256_secret_env".into())
    );
    assert_eq!(
        field(jwt(JwtConfig {
            hs256_secret_env: Some("PATH".into()),
            ..jwt_config()
        })),
        Err("auth.jwt.hs256_secret_env".into())
    );
    assert_eq!(
        field(jwt(JwtConfig {
            leeway_seconds: 3600,
            ..jwt_config()
        })),
        Err("auth.jwt.leeway_seconds".into())
    );

    let dir = tempfile::tempdir().expect("tempdir");
    let short = dir.path().join("short.secret");
    std::fs::write(&short, "too short\n").expect("write");
    assert_eq!(
        field(jwt(JwtConfig {
            jwks_file: None,
            hs256_secret_file: Some(short),
            ..jwt_config()
        })),
        Err("auth.jwt.hs256_secret_file".into())
    );

    let key = |sha256: &str, tenant: &str, permissions: &[&str]| AuthConfig {
        api_keys: vec![ApiKeyEntry {
            sha256: sha256.into(),
            tenant: tenant.into(),
            requester: "r".into(),
            permissions: permissions.iter().map(|p| p.to_string()).collect(),
        }],
        ..Default::default()
    };
    let h = hash_api_key("k");
    assert_eq!(
        field(key("plaintext-key", "acme", &[])),
        Err("auth.api_keys[0].sha256".into())
    );
    assert_eq!(
        field(key(&h, "../acme", &[])),
        Err("auth.api_keys[0].tenant".into())
    );
    let err = Authenticator::from_config(&key(&h, "acme", &["compact", "admin"])).unwrap_err();
    assert_eq!(err.field, "auth.api_keys[0].permissions[1]");
    assert!(err
        .to_string()
        .starts_with("auth.api_keys[0].permissions[1]: unknown permission"));
    let mut dup = key(&h, "acme", &[]);
    dup.api_keys.push(dup.api_keys[0].clone());
    assert_eq!(field(dup), Err("auth.api_keys[1].sha256".into()));

    let mtls = |trust_domain: &str| AuthConfig {
        mtls: Some(MtlsConfig {
            trust_domain: trust_domain.into(),
            ..full_config().mtls.expect("mtls")
        }),
        ..Default::default()
    };
    assert_eq!(
        field(mtls("spiffe://compactd.test")),
        Err("auth.mtls.trust_domain".into())
    );
    assert_eq!(field(mtls("compactd.test")), Ok(()));
    let mut missing_ca = mtls("compactd.test");
    if let Some(m) = missing_ca.mtls.as_mut() {
        m.ca_file = fixture("missing-ca.pem");
    }
    assert_eq!(field(missing_ca), Err("auth.mtls.ca_file".into()));
}

#[test]
fn jwks_skips_foreign_keys_but_rejects_broken_ones() {
    let dir = tempfile::tempdir().expect("tempdir");
    let jwks: Value = serde_json::from_slice(&read("jwks.json")).expect("jwks");
    let write = |name: &str, keys: Value| {
        let path = dir.path().join(name);
        std::fs::write(&path, json!({ "keys": keys }).to_string()).expect("write");
        AuthConfig {
            jwt: Some(JwtConfig {
                jwks_file: Some(path),
                hs256_secret_file: None,
                ..jwt_config()
            }),
            ..Default::default()
        }
    };
    let foreign = json!([
        {"kty": "oct", "kid": "sym", "k": "c2VjcmV0"},
        {"kty": "RSA", "kid": "enc", "use": "enc", "n": "AQAB", "e": "AQAB"},
        {"kty": "OKP", "kid": "ed", "crv": "Ed25519", "x": "AAAA"},
        {"kty": "EC", "kid": "p384", "crv": "P-384", "x": "AA", "y": "AA"},
        jwks["keys"][0].clone(),
    ]);
    let a = Authenticator::from_config(&write("foreign.json", foreign)).expect("config");
    assert!(a.authenticate(&bearer(&rs256(&claims())), None).is_ok());

    let only_foreign = json!([{"kty": "oct", "kid": "sym", "k": "c2VjcmV0"}]);
    assert!(Authenticator::from_config(&write("none.json", only_foreign)).is_err());

    let weak = json!([{"kty": "RSA", "kid": "weak", "n": URL_SAFE_NO_PAD.encode([0xffu8; 128]), "e": "AQAB"}]);
    let err = Authenticator::from_config(&write("weak.json", weak)).unwrap_err();
    assert!(err.message.contains("2048 bits"), "{err}");

    let dup = json!([jwks["keys"][0].clone(), jwks["keys"][0].clone()]);
    let err = Authenticator::from_config(&write("dup.json", dup)).unwrap_err();
    assert!(err.message.contains("duplicate kid"), "{err}");
}
