#!/bin/sh
# Regenerates the unit tests' certificates (security/tls.rs, tls/principal.rs). Valid for
# 100 years; the expected DNs in principal.rs were printed by Java's
# X500Principal.getName() (what Kafka's DefaultKafkaPrincipalBuilder uses) for these files.
# The dn_*.pem files are kept if present (their expected strings came from Java).
set -e
cd "$(dirname "$0")"
ec() { openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 36500 "$@" 2>/dev/null; }
ec -keyout ca.key -out ca.pem -subj "/CN=oxbow test CA"
for n in server server2; do
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout $n.key -out $n.csr -subj "/CN=$n" 2>/dev/null
  printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\n' > $n.ext
  openssl x509 -req -in $n.csr -CA ca.pem -CAkey ca.key -days 36500 -extfile $n.ext -out $n.pem 2>/dev/null
  rm $n.csr $n.ext
done
# A client certificate from the CA (mTLS principal tests).
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout alice.key -out alice.csr -subj "/C=US/O=acme/OU=eng/CN=alice" 2>/dev/null
printf 'basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n' > alice.ext
openssl x509 -req -in alice.csr -CA ca.pem -CAkey ca.key -days 36500 -extfile alice.ext -out alice.pem 2>/dev/null
rm alice.csr alice.ext
# PKCS#1 RSA and SEC1 EC keys load too (the key files above are PKCS#8).
openssl req -x509 -newkey rsa:2048 -nodes -keyout rsa.key -out rsa.pem -days 36500 -subj "/CN=rsa" 2>/dev/null
openssl rsa -in rsa.key -traditional -out rsa.key 2>/dev/null
[ -f dn_simple.pem ] || ec -keyout dn_simple.key -out dn_simple.pem -subj "/C=US/O=acme/OU=eng/CN=alice"
[ -f dn_tricky.pem ] || ec -keyout dn_tricky.key -out dn_tricky.pem -multivalue-rdn -utf8 \
  -subj "/DC=com/DC=example/emailAddress=a@b.c/O=a\,b/OU=x+UID=u1/CN= lead and trail /serialNumber=42/street=Main St/L=Zürich/ST=ZH"
[ -f dn_escapes.pem ] || ec -keyout dn_escapes.key -out dn_escapes.pem -utf8 -subj "/O=a\,b\+c=d;e<f>g#h\"j\\\\k/CN=#x"
rm -f dn_*.key ca.key
