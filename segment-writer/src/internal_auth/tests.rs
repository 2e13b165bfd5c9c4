use super::*;

const A: &[u8] = b"0123456789abcdef0123456789abcdef-cluster-a";
const B: &[u8] = b"fedcba9876543210fedcba9876543210-cluster-b";

fn secrets(s: &[u8]) -> Secrets {
    Secrets::new(s, None).expect("long enough")
}

/// Runs a whole handshake; returns (server's view of client id, client's view of server id).
fn run(client: Secrets, server: Secrets) -> Result<(u32, u32), AuthError> {
    let (c, hello) = ClientHandshake::start(client, 7, [1; NONCE_LEN]);
    let (s, challenge) = ServerHandshake::on_hello(server, 9, [2; NONCE_LEN], &hello)?;
    let (server_id, proof) = c.on_challenge(&challenge)?;
    let client_id = s.on_proof(&proof)?;
    Ok((client_id, server_id))
}

#[test]
fn same_secret_authenticates_both_ways() {
    assert_eq!(run(secrets(A), secrets(A)), Ok((7, 9)));
}

#[test]
fn wrong_secret_is_refused_by_the_client_first() {
    assert_eq!(run(secrets(B), secrets(A)), Err(AuthError::BadProof));
}

#[test]
fn wrong_secret_client_is_refused_by_the_server() {
    // A client that skips verifying the server still cannot make a proof.
    let (_c, hello) = ClientHandshake::start(secrets(B), 7, [1; NONCE_LEN]);
    let (s, _challenge) =
        ServerHandshake::on_hello(secrets(A), 9, [2; NONCE_LEN], &hello).expect("hello");
    let mut forged = MAGIC.to_vec();
    forged.extend_from_slice(&[0u8; PROOF_LEN]);
    assert_eq!(s.on_proof(&forged), Err(AuthError::BadProof));
}

#[test]
fn replayed_proof_fails_with_a_fresh_server_nonce() {
    let (c, hello) = ClientHandshake::start(secrets(A), 7, [1; NONCE_LEN]);
    let (_s, challenge) =
        ServerHandshake::on_hello(secrets(A), 9, [2; NONCE_LEN], &hello).expect("hello");
    let (_, recorded_proof) = c.on_challenge(&challenge).expect("challenge");
    // An eavesdropper replays the same Hello and Proof on a new connection.
    let (s2, _) = ServerHandshake::on_hello(secrets(A), 9, [3; NONCE_LEN], &hello).expect("hello");
    assert_eq!(s2.on_proof(&recorded_proof), Err(AuthError::BadProof));
}

#[test]
fn proof_bound_to_the_claimed_broker_id() {
    let (c, hello) = ClientHandshake::start(secrets(A), 7, [1; NONCE_LEN]);
    let (_s, challenge) =
        ServerHandshake::on_hello(secrets(A), 9, [2; NONCE_LEN], &hello).expect("hello");
    let (_, proof) = c.on_challenge(&challenge).expect("challenge");
    // Same nonces, but the Hello claims broker 8: broker 7's proof does not carry over.
    let mut hello8 = hello.clone();
    hello8[5..9].copy_from_slice(&8u32.to_be_bytes());
    let (s8, _) = ServerHandshake::on_hello(secrets(A), 9, [2; NONCE_LEN], &hello8).expect("hello");
    assert_eq!(s8.on_proof(&proof), Err(AuthError::BadProof));
}

#[test]
fn server_proof_cannot_be_reflected_as_a_client_proof() {
    let (_c, hello) = ClientHandshake::start(secrets(A), 7, [1; NONCE_LEN]);
    let (s, challenge) =
        ServerHandshake::on_hello(secrets(A), 9, [2; NONCE_LEN], &hello).expect("hello");
    let mut reflected = MAGIC.to_vec();
    reflected.extend_from_slice(&challenge[9 + NONCE_LEN..]);
    assert_eq!(s.on_proof(&reflected), Err(AuthError::BadProof));
}

#[test]
fn truncated_oversized_and_old_protocol_frames_are_refused() {
    let (_c, hello) = ClientHandshake::start(secrets(A), 7, [1; NONCE_LEN]);
    let on = |h: &[u8]| ServerHandshake::on_hello(secrets(A), 9, [2; NONCE_LEN], h).map(|_| ());
    assert!(matches!(
        on(&hello[..HELLO_LEN - 1]),
        Err(AuthError::BadLength { .. })
    ));
    let mut long = hello.clone();
    long.push(0);
    assert!(matches!(on(&long), Err(AuthError::BadLength { .. })));
    assert!(matches!(on(&[]), Err(AuthError::BadLength { .. })));
    // An old-protocol frame starts with a big-endian length prefix.
    let mut old = vec![0, 0, 0, 37];
    old.resize(HELLO_LEN, 0);
    assert_eq!(on(&old), Err(AuthError::BadMagic));
    let mut v2 = hello;
    v2[4] = 2;
    assert_eq!(on(&v2), Err(AuthError::BadVersion(2)));
}

#[test]
fn rotation_in_three_rolling_steps() {
    // Step 1 ("A\nB": prove with A, accept B too) meets brokers still on "A".
    let step1 = Secrets::new(A, Some(B)).expect("long enough");
    assert_eq!(run(secrets(A), step1.clone()), Ok((7, 9)));
    assert_eq!(run(step1.clone(), secrets(A)), Ok((7, 9)));
    // Step 2 ("B\nA": prove with B, accept A) meets brokers still on step 1.
    let step2 = Secrets::new(B, Some(A)).expect("long enough");
    assert_eq!(run(step1.clone(), step2.clone()), Ok((7, 9)));
    assert_eq!(run(step2.clone(), step1), Ok((7, 9)));
    // Step 3 ("B") meets brokers on step 2; a broker still on "A" alone is refused.
    assert_eq!(run(step2.clone(), secrets(B)), Ok((7, 9)));
    assert_eq!(run(secrets(B), step2), Ok((7, 9)));
    assert_eq!(run(secrets(A), secrets(B)), Err(AuthError::BadProof));
}

#[test]
fn secret_file_contents() {
    assert_eq!(
        Secrets::from_file_contents(b"short\n").err(),
        Some(AuthError::SecretTooShort(5))
    );
    assert_eq!(
        Secrets::from_file_contents(b"").err(),
        Some(AuthError::SecretTooShort(0))
    );
    let mut two = A.to_vec();
    two.extend_from_slice(b"\n\n");
    two.extend_from_slice(B);
    two.push(b'\n');
    let s = Secrets::from_file_contents(&two).expect("two lines");
    assert!(s.previous.is_some());
    assert_eq!(run(s, secrets(A)), Ok((7, 9)));
    let mut three = two.clone();
    three.extend_from_slice(A);
    assert_eq!(
        Secrets::from_file_contents(&three).err(),
        Some(AuthError::TooManySecrets(3))
    );
    let dbg = format!("{:?}", Secrets::from_file_contents(A).expect("one line"));
    assert!(!dbg.contains("0123"), "{dbg}");
}

#[tokio::test]
async fn driver_over_a_duplex_and_its_timeout() {
    use std::time::Duration;
    let (mut a, mut b) = tokio::io::duplex(4096);
    let far = || -> oxbow_metadata::clock::Sleep {
        Box::pin(tokio::time::sleep(Duration::from_secs(60)))
    };
    let (c, s) = tokio::join!(
        client(&mut a, secrets(A), 7, [1; NONCE_LEN], far()),
        server(&mut b, secrets(A), 9, [2; NONCE_LEN], far()),
    );
    assert_eq!((c.expect("client"), s.expect("server")), (9, 7));

    // A peer that connects and says nothing is dropped at the deadline.
    tokio::time::pause();
    let (_silent, mut b) = tokio::io::duplex(4096);
    let r = server(&mut b, secrets(A), 9, [2; NONCE_LEN], far()).await;
    assert!(matches!(r, Err(HandshakeError::Timeout)), "{r:?}");
}

#[tokio::test(start_paused = true)]
async fn an_old_protocol_peer_is_refused_at_once_and_a_silent_close_is_told_apart() {
    use tokio::io::AsyncWriteExt;
    let far = || -> oxbow_metadata::clock::Sleep {
        Box::pin(tokio::time::sleep(std::time::Duration::from_secs(60)))
    };
    // An old-protocol Hello (a 25-byte frame: shorter than a handshake Hello) is refused
    // on its first four bytes, not at the deadline (time is paused: waiting would time out).
    let (mut old, mut b) = tokio::io::duplex(4096);
    let mut hello = 21u32.to_be_bytes().to_vec();
    hello.push(1);
    hello.extend_from_slice(&[0; 20]);
    old.write_all(&hello).await.expect("write");
    let r = server(&mut b, secrets(A), 9, [2; NONCE_LEN], far()).await;
    assert!(
        matches!(r, Err(HandshakeError::Auth(AuthError::BadMagic))),
        "{r:?}"
    );
    // A peer that hangs up before a byte.
    let (gone, mut b) = tokio::io::duplex(4096);
    drop(gone);
    let r = server(&mut b, secrets(A), 9, [2; NONCE_LEN], far()).await;
    assert!(matches!(r, Err(HandshakeError::Closed)), "{r:?}");
}
