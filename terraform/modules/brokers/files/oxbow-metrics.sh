#!/bin/bash
# Publishes the broker's ingest rate to CloudWatch for target-tracking scaling: the rate of
# oxbow_appended_bytes_total (record batch bytes this broker appended as a partition
# leader) from its /metrics, one datapoint per interval, under the dimension
# AutoScalingGroupName only, so the group's Average is the mean per-broker ingest. A
# counter reset (broker restart) or a failed scrape skips one datapoint.
set -uo pipefail

DEPLOY_ENV="${OXBOW_DEPLOY_ENV:-/etc/oxbow/deploy.env}"
IMDS="${IMDS_ENDPOINT:-http://169.254.169.254}"
INTERVAL_SECONDS="${OXBOW_METRICS_INTERVAL_SECONDS:-60}"
ROUNDS="${OXBOW_METRICS_ROUNDS:-0}" # 0: forever
# shellcheck source=/dev/null
. "$DEPLOY_ENV"

region="${AWS_REGION:-}"
if [ -z "$region" ]; then
    token="$(curl -fsS --retry 5 --max-time 5 -X PUT "$IMDS/latest/api/token" \
        -H "X-aws-ec2-metadata-token-ttl-seconds: 60")"
    region="$(curl -fsS --retry 5 --max-time 5 -H "X-aws-ec2-metadata-token: $token" \
        "$IMDS/latest/meta-data/placement/region")"
fi

prev_bytes=""
prev_ns=""
round=0
while [ "$ROUNDS" -eq 0 ] || [ "$round" -le "$ROUNDS" ]; do
    now_ns="$(date +%s%N)"
    bytes="$(curl -fsS --max-time 5 "http://127.0.0.1:$HTTP_PORT/metrics" |
        awk '$1 == "oxbow_appended_bytes_total" { printf "%.0f", $2 }')"
    if [ -n "$bytes" ] && [ -n "$prev_bytes" ] && [ "$bytes" -ge "$prev_bytes" ]; then
        rate="$(awk -v b="$((bytes - prev_bytes))" -v ns="$((now_ns - prev_ns))" 'BEGIN { printf "%.1f", b * 1e9 / ns }')"
        aws cloudwatch put-metric-data \
            --region "$region" \
            --namespace "$METRICS_NAMESPACE" \
            --metric-name AppendedBytesPerSecond \
            --unit Bytes/Second \
            --dimensions "AutoScalingGroupName=$ASG_NAME" \
            --value "$rate" || echo "oxbow-metrics: put-metric-data failed" >&2
    fi
    prev_bytes="$bytes"
    prev_ns="$now_ns"
    round=$((round + 1))
    [ "$ROUNDS" -ne 0 ] && [ "$round" -gt "$ROUNDS" ] && break
    sleep "$INTERVAL_SECONDS"
done
