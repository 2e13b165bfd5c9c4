#!/bin/bash
# Writes the broker's settings (/etc/oxbow/oxbow.env, read by oxbow.service) from this
# instance's metadata (IMDSv2) and the deployment's settings (/etc/oxbow/deploy.env,
# written by cloud-init from Terraform). Runs before every start of the broker.
#
# Broker id: the instance's private address as an offset into the VPC's range. Running
# instances never share an address, so ids are unique without coordination; an id reused
# by a later instance looks to the cluster like that broker restarted without its disk,
# which it recovers from (its WAL replicas, then S3). Zone: the zone ID (use1-az1), the
# same in every account, which is what clients set as client.rack for zone-local reads.
set -euo pipefail

DEPLOY_ENV="${OXBOW_DEPLOY_ENV:-/etc/oxbow/deploy.env}"
OUT="${OXBOW_ENV_FILE:-/etc/oxbow/oxbow.env}"
IMDS="${IMDS_ENDPOINT:-http://169.254.169.254}"
# shellcheck source=/dev/null
. "$DEPLOY_ENV"

token="$(curl -fsS --retry 5 --max-time 5 -X PUT "$IMDS/latest/api/token" \
    -H "X-aws-ec2-metadata-token-ttl-seconds: 300")"
md() { curl -fsS --retry 5 --max-time 5 -H "X-aws-ec2-metadata-token: $token" "$IMDS/latest/meta-data/$1"; }

ip="$(md local-ipv4)"
zone_id="$(md placement/availability-zone-id)"
region="$(md placement/region)"

to_int() {
    local a b c d
    IFS=. read -r a b c d <<<"$1"
    echo $(((a << 24) | (b << 16) | (c << 8) | d))
}
vpc_base="${VPC_CIDR%/*}"
vpc_bits="${VPC_CIDR#*/}"
offset=$(($(to_int "$ip") - $(to_int "$vpc_base")))
if [ "$offset" -le 0 ] || [ "$offset" -ge $((1 << (32 - vpc_bits))) ]; then
    echo "address $ip is not inside VPC range $VPC_CIDR" >&2
    exit 1
fi

tmp="$(mktemp "$OUT.XXXXXX")"
{
    echo "# Written by oxbow-env from instance metadata and $DEPLOY_ENV; edits are lost."
    echo "OXBOW_BROKER_ID=$offset"
    echo "OXBOW_AZ=$zone_id"
    echo "OXBOW_KAFKA_ADDR=0.0.0.0:$KAFKA_PORT"
    echo "OXBOW_ADVERTISED_KAFKA_ADDR=$ip:$KAFKA_PORT"
    echo "OXBOW_HTTP_ADDR=0.0.0.0:$HTTP_PORT"
    echo "OXBOW_INTERNAL_ADDR=$ip:$INTERNAL_PORT"
    echo "OXBOW_METADATA=$METADATA"
    echo "OXBOW_OBJECT_STORE=$OBJECT_STORE"
    [ -z "${CACHE_DIR:-}" ] || echo "OXBOW_CACHE_DIR=$CACHE_DIR"
    [ -z "${INTERNAL_SECRET_FILE:-}" ] || echo "OXBOW_INTERNAL_AUTH_SECRET_FILE=$INTERNAL_SECRET_FILE"
    echo "AWS_REGION=$region"
    # Operator settings from Terraform's extra_environment, last so they win.
    [ ! -f "${EXTRA_ENV_FILE:-/nonexistent}" ] || cat "$EXTRA_ENV_FILE"
} >"$tmp"
chmod 0640 "$tmp"
mv "$tmp" "$OUT"
echo "oxbow-env: broker $offset in $zone_id at $ip"
